"""The env adapters stand on public APIs: no module in ``rescue_env/envs/`` reaches into
another object's private names (``x._name`` where ``x`` is not ``self``/``cls``) or imports a
private name from another module."""

from __future__ import annotations

import ast
from pathlib import Path

import rescue_env.envs

ENVS = Path(rescue_env.envs.__file__).parent


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_reaches(source: str) -> list[str]:
    """``line: code`` of each private reach across objects in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom):
            found += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names if _private(a.name)]
    return found


def test_the_scan_finds_what_it_looks_for():
    src = "from a import _b\nx._y\nself._z\ncls._w\nself.core._kernel\nobj.__class__\n"
    assert private_reaches(src) == ["1: from a import _b", "2: x._y", "5: self.core._kernel"]


def test_no_private_reach_across_objects_in_the_envs():
    found = {p.name: private_reaches(p.read_text()) for p in sorted(ENVS.glob("*.py"))}
    assert len(found) >= 6  # the adapters were scanned
    assert {name: hits for name, hits in found.items() if hits} == {}
