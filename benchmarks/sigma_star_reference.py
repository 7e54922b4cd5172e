"""Measure the σ* return of the baseline agents on both scenarios — the figures the simulator
must keep through a rewrite (``tests/envs/test_sigma_star_equivalence.py`` checks them).

Run: ``python benchmarks/sigma_star_reference.py [--reps 20] [--seed 0] [--jobs 2] [--write]``.
Prints, per scenario and agent (never / random / heuristic / imitation), the episodes, the
mean discounted σ* return with its 95 % interval, the per-episode and within-cell standard
deviations; ``--write`` records them, with the commit and the command, in
``tests/envs/data/sigma_star_reference.json``. The design (every (seed dialogue, start row)
cell of the bundled seeds played ``reps`` times, a stratified mean and its normal interval)
is in :mod:`rescue_env.equivalence`, which the test uses too. Regenerate only when the model is *meant* to change.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from rescue_env.agents import make_agent
from rescue_env.atomic import atomic_write_text
from rescue_env.equivalence import AGENTS, ENV_IDS, MIN_PREFIX, Estimate, design_summary, measure

REPO = Path(__file__).resolve().parents[1]
#: where the test reads the reference (written here, never imported from there)
REFERENCE_PATH = REPO / "tests" / "envs" / "data" / "sigma_star_reference.json"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()


def _measure(job: tuple[str, str, int, int]) -> tuple[str, str, Estimate, float]:
    scenario, agent, reps, seed = job
    t0 = time.perf_counter()
    est = measure(scenario, make_agent(agent, scenario, seed=seed), reps, seed)
    return scenario, agent, est, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=20, help="episodes per (seed dialogue, start row) cell (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="base seed of the reset seeds (default 0)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--write", action="store_true", help=f"record the figures in {REFERENCE_PATH.relative_to(REPO)}")
    args = parser.parse_args(argv)

    jobs = [(s, a, args.reps, args.seed) for s in ENV_IDS for a in AGENTS]
    results: dict[str, dict[str, dict]] = {s: {} for s in ENV_IDS}
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for scenario, agent, est, dt in pool.map(_measure, jobs):
            results[scenario][agent] = est.to_json()
            print(
                f"{scenario:7s} {agent:10s} n={est.n:5d}  mean {est.mean:8.3f}  95% CI [{est.ci_low:8.3f}, {est.ci_high:8.3f}]"
                f"  sd {est.sd:6.3f}  within-cell sd {est.within_cell_sd:6.3f}  ({dt:.0f} s)",
                flush=True,
            )
    print(f"{time.perf_counter() - t0:.0f} s in all")
    if not args.write:
        return
    dirty = _git("status", "--porcelain", "--", "rescue_env", "agents")
    record = {
        "what": "discounted σ* return (info['sigma_return']) per episode, gym.make defaults, bundled seed dialogues",
        "design": (
            "stratified by (seed dialogue, start row in [min_prefix, last row]); each cell played `reps` times; "
            "cell weight 1/(dialogues × start rows of its dialogue) = the default reset's distribution"
        ),
        "interval": "95 % normal interval of the stratified mean: se² = Σ_c w_c² s_c² / reps",
        "min_prefix": MIN_PREFIX,
        "reps": args.reps,
        "base_seed": args.seed,
        "cells": {s: design_summary(s) for s in ENV_IDS},
        "commit": _git("rev-parse", "HEAD") + (" (+ uncommitted changes in rescue_env/agents)" if dirty else ""),
        "command": "python benchmarks/sigma_star_reference.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "figures": results,
    }
    REFERENCE_PATH.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(REFERENCE_PATH, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {REFERENCE_PATH}")


if __name__ == "__main__":
    main()
