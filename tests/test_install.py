"""The install adds one import namespace: ``rescue_env`` (agents/, experiments/ and conf/ live
under it), so a plain ``pip install`` never shadows another project's ``agents`` or ``conf``."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: repository folder -> its import name once installed
FOLDERS = {"rescue_env": "rescue_env", "agents": "rescue_env.agents", "experiments": "rescue_env.experiments", "conf": "rescue_env.conf"}
GENERIC = {"agents", "experiments", "conf"}


def _packages_on_disk() -> set[str]:
    found = set()
    for folder, name in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *rel)))
    return found


def test_every_package_is_listed_under_the_namespace():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(setuptools["packages"]) == _packages_on_disk()
    assert {k: v for k, v in setuptools["package-dir"].items()} == {v: k for k, v in FOLDERS.items() if k != v}


def test_no_module_imports_a_generic_top_level_name():
    offenders = []
    for folder in (*FOLDERS, "tests", "benchmarks", "scripts"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                offenders += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in names if n.split(".")[0] in GENERIC]
    assert not offenders, "import these as rescue_env.<name>: " + ", ".join(offenders)


@pytest.mark.timeout(180)
def test_the_wheel_holds_one_top_level_package(tmp_path):
    """Build the wheel as ``pip install .`` would and read its top-level names. The build runs
    on a copy of the sources: setuptools writes build/ and *.egg-info into the tree it builds."""
    import shutil

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in FOLDERS:
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.nb[ci]", "*.pyc"))
    run = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path / "dist")],
        capture_output=True, text=True,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("rescue_env-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"rescue_env"}
    # the moved folders arrive whole: modules, the Hydra configs, the bundled seeds
    assert "rescue_env/agents/heuristic.py" in names and "rescue_env/experiments/cli.py" in names
    assert "rescue_env/conf/rollout.yaml" in names and any(n.startswith("rescue_env/conf/env/") for n in names)
    assert any(n.startswith("rescue_env/data/seeds/") for n in names)
