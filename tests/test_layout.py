"""No library function runs over 80 lines (the project's rule): each reads at once. The two
validating parsers of :mod:`rescue_env.data.loader` may, being one long list of checks."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("rescue_env", "agents", "experiments")
MAX_LINES = 80
#: long by nature: each is one list of validation checks, read top to bottom
EXEMPT = {"rescue_env/data/loader.py:_DialogueParser.parse", "rescue_env/data/loader.py:_DialogueParser.parse_row"}


def long_functions() -> dict[str, int]:
    """``path:Qualified.name`` → lines, for every function over :data:`MAX_LINES` lines."""
    out: dict[str, int] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            out.update(_long_in(tree, path.relative_to(REPO).as_posix(), ""))
    return out


def _long_in(node: ast.AST, where: str, prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = prefix + child.name
            lines = child.end_lineno - child.lineno + 1  # type: ignore[operator]
            if lines > MAX_LINES:
                out[f"{where}:{name}"] = lines
            out.update(_long_in(child, where, f"{name}."))
        elif isinstance(child, ast.ClassDef):
            out.update(_long_in(child, where, f"{prefix}{child.name}."))
    return out


def test_the_exemptions_name_real_functions():
    loader = ast.parse((REPO / "rescue_env/data/loader.py").read_text(encoding="utf-8"))
    names = set(_long_in(loader, "rescue_env/data/loader.py", "")) | {
        f"rescue_env/data/loader.py:{c.name}.{f.name}" for c in loader.body if isinstance(c, ast.ClassDef) for f in c.body
        if isinstance(f, ast.FunctionDef)
    }
    assert EXEMPT <= names


def test_no_library_function_over_80_lines():
    over = {name: n for name, n in long_functions().items() if name not in EXEMPT}
    assert over == {}, f"functions over {MAX_LINES} lines: {over}"
