"""Shared fixtures: the bundled seeds, the real RESCUE-BENCH subset and second slice (when
``../shared`` is there) and a runner for the ``rescue`` console script.

The real data lives beside the repository (``../shared/data/rescue-bench-subset``,
``../shared/data/rescue-bench-more``); a user's fresh clone has no ``../shared``, so every
fixture that needs it skips cleanly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
import os
from pathlib import Path
from typing import Any

import pytest

from rescue_env.jsonl import split_lines

REPO_ROOT = Path(__file__).resolve().parents[1]
#: ``../shared`` beside the repository; ``RESCUE_SHARED_DIR`` names it elsewhere (a worktree).
SHARED = Path(os.environ.get("RESCUE_SHARED_DIR") or REPO_ROOT.parent / "shared")
REAL_SUBSET = SHARED / "data" / "rescue-bench-subset" / "benchmark_subset.jsonl"
REAL_MORE = SHARED / "data" / "rescue-bench-more" / "benchmark_more.jsonl"
REAL_EXTRA = SHARED / "data" / "rescue-bench-extra" / "benchmark_extra.jsonl"
#: The couple session of the second slice with three partners (its README's quirk).
THREE_PARTNER_ID = "aryn_josh_and_lorena/009_s04e09_ct34_segment04"


# --- the real subset ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def real_subset_path() -> Path:
    """``../shared/data/rescue-bench-subset/benchmark_subset.jsonl``; skips when absent."""
    if not REAL_SUBSET.is_file():
        pytest.skip(f"real RESCUE-BENCH subset not found at {REAL_SUBSET} (no ../shared beside the repo)")
    return REAL_SUBSET


@pytest.fixture(scope="session")
def real_lines(real_subset_path: Path) -> list[str]:
    """The subset's lines as published (one dialogue per line)."""
    return split_lines(real_subset_path.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def real_records(real_lines: list[str]) -> list[dict[str, Any]]:
    """The subset's JSON objects as published (unrepaired text)."""
    return [json.loads(line) for line in real_lines]


@pytest.fixture(scope="session")
def real_dialogues(real_subset_path: Path):
    """The subset loaded by the library. Shared by many tests: do not mutate."""
    from rescue_env.data import load_dialogues

    return load_dialogues(real_subset_path)


# --- the second real slice ------------------------------------------------------------------


@pytest.fixture(scope="session")
def real_more_path() -> Path:
    """``../shared/data/rescue-bench-more/benchmark_more.jsonl`` (5 couples the subset does
    not have, one of them with three partners); skips when absent."""
    if not REAL_MORE.is_file():
        pytest.skip(f"second real RESCUE-BENCH slice not found at {REAL_MORE} (no ../shared beside the repo)")
    return REAL_MORE


@pytest.fixture(scope="session")
def real_extra_path() -> Path:
    """``../shared/data/rescue-bench-extra/benchmark_extra.jsonl`` (8 family sessions of 5
    families, 9 sessions of one couple); skips when absent."""
    if not REAL_EXTRA.is_file():
        pytest.skip(f"third real RESCUE-BENCH slice not found at {REAL_EXTRA} (no ../shared beside the repo)")
    return REAL_EXTRA


@pytest.fixture(scope="session")
def real_more_dialogues(real_more_path: Path):
    """The second slice loaded by the library. Do not mutate."""
    from rescue_env.data import load_dialogues

    return load_dialogues(real_more_path)


@pytest.fixture(scope="session")
def three_partner_couple(real_more_dialogues):
    """The ``"couple"`` session with three partners (Lorena, Aryn, Josh). Do not mutate."""
    (d,) = [d for d in real_more_dialogues if d.sample_id == THREE_PARTNER_ID]
    return d


# --- the bundled seeds ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def seeds_path() -> Path:
    from rescue_env.data import bundled_seeds_path

    path = bundled_seeds_path()
    assert path.is_dir(), f"bundled seeds missing at {path}"
    return path


@pytest.fixture(scope="session")
def seed_records(seeds_path: Path) -> dict[str, dict[str, Any]]:
    """Seed JSON objects as shipped, keyed by path relative to the seeds folder (no suffix)."""
    out = {}
    for f in sorted(seeds_path.rglob("*.json")):
        if f.name == "manifest.json":
            continue
        out[f.relative_to(seeds_path).with_suffix("").as_posix()] = json.loads(f.read_text(encoding="utf-8"))
    return out


@pytest.fixture(scope="session")
def seed_dialogues():
    """The bundled seeds loaded by the library (the default data set). Do not mutate."""
    from rescue_env.data import load_dialogues

    return load_dialogues()


# --- the console script ---------------------------------------------------------------------


@dataclass
class CliResult:
    rc: int
    out: str
    err: str


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """``run_cli("data", "validate", path)`` → exit code, stdout and stderr of ``rescue``."""
    from rescue_env.experiments.cli import main

    def run(*argv: str | Path) -> CliResult:
        capsys.readouterr()  # drop anything printed before
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as e:  # argparse errors
            rc = e.code if isinstance(e.code, int) else 1
        captured = capsys.readouterr()
        return CliResult(rc, captured.out, captured.err)

    return run
