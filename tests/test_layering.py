"""The library does not depend on the project's applications: ``rescue_env`` imports nothing
from the top-level ``agents`` or ``experiments`` packages (they build on it, not the reverse)."""

from __future__ import annotations

import ast
from pathlib import Path

import rescue_env

ROOT = Path(rescue_env.__file__).resolve().parent


def test_rescue_env_imports_nothing_from_agents_or_experiments():
    offenders = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] in ("agents", "experiments")]
    assert offenders == []
