"""Sweeps (``-m``) that survive a bad job.

Hydra's joblib launcher runs the jobs of a sweep in worker processes. A job that exits
(``SystemExit``, as a refused setting does in a single run) takes its worker down, and joblib
then cancels every job in flight, so one bad value would cost the whole sweep its work and
its summary. In a sweep, therefore, a job never exits and never raises: :func:`run_job` runs
the command's task function, turns a user error (one line, as in a single run) or a bug (its
traceback) into the job's exit status, writes that status with its error into the job's
folder (``job_status.json``) and returns; the other jobs go on.

When the sweep ends, :func:`sweep_outcome` reads every job's status (the jobs may have run
in other processes or on other machines) and the guard callback prints the failed jobs with
their errors and sets the command's exit code: 0 every job ran; 3 some jobs failed (the rest
finished and are summarised); 2 every job was refused as a user error (nothing ran); 1 a
job hit a bug.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from rescue_env.atomic import atomic_write_text
from rescue_env.secrets import scrub

log = logging.getLogger(__name__)

#: The file in each job's folder that records how the job ended.
JOB_STATUS = "job_status.json"

# A refusal of the current job by the guard (exit code, message), taken by run_job: a
# callback cannot stop a job, and exiting would take the joblib worker down.
_refusal: tuple[int, str] | None = None


def in_sweep() -> bool:
    """Whether this process is running a job of a Hydra multirun."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def refuse_job(code: int, message: str) -> None:
    """Make :func:`run_job` report ``message`` and end the current job with ``code``
    instead of running it."""
    global _refusal
    _refusal = (code, message)


def run_job(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> int:
    """Run one job of a sweep and return its exit status; it never raises nor exits (except
    on Ctrl-C), and it records the status in the job's folder."""
    from rescue_env.experiments.errors import EXIT_BUG, EXIT_USER_ERROR, USER_ERRORS, report_error, take_outcome

    global _refusal
    refusal, _refusal = _refusal, None
    take_outcome()  # this job's outcome only (a worker process runs several jobs)
    error = ""
    if refusal is not None:
        code, error = refusal
        report_error(f"job {_job_name()}: {error}")
    else:
        try:
            fn(*args, **kwargs)
            code, error = take_outcome()[0], ""
        except USER_ERRORS as exc:
            code, error = EXIT_USER_ERROR, str(exc)
            report_error(f"job {_job_name()}: {error}")
        except Exception as exc:  # a bug: its traceback, and the other jobs go on
            traceback.print_exc(file=sys.stderr)
            code, error = EXIT_BUG, f"{type(exc).__name__}: {exc}"
    write_status(Path(HydraConfig.get().runtime.output_dir), code, error)
    return code


def _job_name() -> str:
    return str(HydraConfig.get().job.num)


def write_status(job_dir: Path, code: int, error: str) -> None:
    """Record how a job ended (``{"exit_code": N, "error": "..."}``) in its folder."""
    record = {"exit_code": int(code), "error": scrub(error.strip().splitlines()[0] if error.strip() else "")}
    try:
        job_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(job_dir / JOB_STATUS, json.dumps(record) + "\n")
    except OSError as exc:  # the status is a report; the job's own outputs are what matter
        log.warning("could not record the job's status in %s: %s", job_dir, exc)


def read_status(job_dir: Path) -> dict[str, Any] | None:
    """The recorded status of a job folder (None when it has none or it is unreadable)."""
    try:
        record = json.loads((job_dir / JOB_STATUS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("exit_code"), int) else None


@dataclass
class SweepOutcome:
    """How the jobs of a sweep ended."""

    jobs: int
    failed: list[tuple[str, int, str]]
    """(job folder relative to the sweep folder, exit code, error) of each job that did not succeed."""

    @property
    def exit_code(self) -> int:
        """The sweep's exit code (see the module docstring)."""
        codes = [code for _, code, _ in self.failed]
        if not codes:
            return 0
        if 1 in codes:
            return 1
        if len(codes) == self.jobs and all(code == 2 for code in codes):
            return 2
        return 3


def sweep_outcome(sweep_dir: Path) -> SweepOutcome:
    """Read the status of every job folder under ``sweep_dir``."""
    records = sorted(
        ((p.parent, read_status(p.parent)) for p in Path(sweep_dir).rglob(JOB_STATUS)),
        key=lambda item: [int(x) if x.isdigit() else x for x in item[0].relative_to(sweep_dir).parts],
    )
    failed = [
        (str(path.relative_to(sweep_dir)), int(rec["exit_code"]), str(rec.get("error", "")))
        for path, rec in records if rec is not None and rec["exit_code"] != 0
    ]
    return SweepOutcome(len(records), failed)


def describe(outcome: SweepOutcome) -> list[str]:
    """Lines naming each failed job and why (empty when every job succeeded)."""
    if not outcome.failed:
        return []
    meaning = {1: "bug", 2: "refused", 3: "some episodes failed"}
    rest = "none finished" if len(outcome.failed) >= outcome.jobs else "the others finished and are summarised"
    lines = [f"{len(outcome.failed)} of {outcome.jobs} jobs failed; {rest}:"]
    for job, code, error in outcome.failed:
        lines.append(f"  job {job}: exit {code} ({meaning.get(code, 'failed')})" + (f": {error}" if error else ""))
    return lines
