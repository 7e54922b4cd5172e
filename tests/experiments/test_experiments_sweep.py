"""Sweeps that survive a bad job: with the joblib launcher, a job that fails at run time
does not take the jobs in flight with it; the sweep summary lists it with its error and the
exit code says that some jobs failed."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

from rescue_env.experiments.sweep import JOB_STATUS, SweepOutcome, sweep_outcome, write_status

REPO = Path(__file__).resolve().parents[2]


def test_one_bad_job_of_a_joblib_sweep_spares_the_others(tmp_path):
    sweep_dir = tmp_path / "sweep"
    missing = tmp_path / "missing.jsonl"
    # two jobs run at once (the default launcher: joblib, n_jobs=2); job 1's data file does
    # not exist, which only the job itself finds out
    args = [
        sys.executable, "-m", "rescue_env.experiments.cli", "rollout", "-m", f"hydra.sweep.dir={sweep_dir}",
        "episodes=1", "agents=[never,heuristic]", "progress=false", "report=false", f"data.path=null,{missing}",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 3, proc.stderr[-3000:]  # ran, but some jobs failed

    good, bad = sweep_dir / "0", sweep_dir / "1"
    metrics = json.loads((good / "metrics.json").read_text())
    assert metrics["agents"]["never"]["episodes"] == 9  # the good job finished all its episodes
    assert json.loads((good / JOB_STATUS).read_text()) == {"exit_code": 0, "error": ""}
    status = json.loads((bad / JOB_STATUS).read_text())
    assert status["exit_code"] == 2 and str(missing) in status["error"] and "does not exist" in status["error"]

    # the failed job is named with its error, in the output and in the sweep summary
    assert "1 of 2 jobs failed" in proc.stderr and f"job 1: exit 2 (refused): {missing}" in proc.stderr
    assert "Traceback" not in proc.stderr
    with (sweep_dir / "jobs.csv").open() as f:
        rows = {row["job"]: row for row in csv.DictReader(f)}
    assert rows["0"]["status"] == "ok" and rows["1"]["status"].startswith("failed (exit 2): ")
    assert str(missing) in rows["1"]["status"]
    assert (sweep_dir / "summary.csv").is_file()


def test_the_sweep_exit_code_follows_its_jobs(tmp_path):
    for num, code, error in [(0, 0, ""), (1, 3, ""), (2, 2, "bad value\nsecond line")]:
        write_status(tmp_path / str(num), code, error)
    outcome = sweep_outcome(tmp_path)
    assert outcome.jobs == 3 and outcome.failed == [("1", 3, ""), ("2", 2, "bad value")]
    assert outcome.exit_code == 3  # some jobs failed, others ran
    assert SweepOutcome(2, []).exit_code == 0
    assert SweepOutcome(2, [("0", 2, "x"), ("1", 2, "y")]).exit_code == 2  # every job refused: nothing ran
    assert SweepOutcome(3, [("0", 2, "x"), ("1", 1, "KeyError")]).exit_code == 1  # a bug
