"""Running ``rescue`` in-process for tests (shared by tests/experiments and tests/llm)."""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Run:
    """One ``rescue`` command run in-process: exit code, printed output, run folder."""

    rc: int
    out: str
    err: str
    dir: Path | None = None


def invoke(argv: list[str], *, env: dict[str, str] | None = None) -> Run:
    """``rescue ARGV`` in this process (``rescue_env.experiments.cli.main``), capturing stdout/stderr
    (Hydra's console log handler included: it binds ``sys.stdout`` when the job starts) and
    restoring ``sys.argv`` and the environment afterwards. A Hydra failure (which exits)
    comes back as ``rc != 0``."""
    from rescue_env.experiments.cli import main

    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", list(sys.argv))
        for k, v in (env or {}).items():
            mp.setenv(k, v)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main([str(a) for a in argv])
            except SystemExit as e:
                rc = e.code if isinstance(e.code, int) else 1
    return Run(rc, out.getvalue(), err.getvalue())
