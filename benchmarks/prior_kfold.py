"""The behaviour prior against the majority baseline, leave-one-group-out on real dialogues.

Run: ``python benchmarks/prior_kfold.py [--tasks itp,stp,ssp] [--profile paper] [--json FILE]``.

Each couple or family of the three real slices of ``../shared/data`` (subset, more, extra;
:func:`rescue_env.data.groups.session_groups`: all its sessions together) is held out in
turn; the prior and the majority baseline are fitted on the other groups only (the prior's
regularisation is chosen by group k-fold inside those training groups), answer the held-out
group's ITP/STP/SSP instances, and the answers of all folds are scored once
(:func:`rescue_env.agents.prior.cross_validate`). Prints ITP F1, STP R@1 and SSP R@1 (%) per
scenario for both, with the instance counts and whether the prior reaches the majority's
figure; for STP/SSP also the instances each answers right, the discordant pairs and an exact
McNemar test of the difference (a gap of one instance is not one the data can tell). Needs ``../shared/data`` (``RESCUE_SHARED_DIR`` names ``shared`` elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from tabulate import tabulate

from rescue_env.agents.prior import cross_validate
from rescue_env.data import load_dialogues
from rescue_env.tasks.instances import PROFILES

SHARED = Path(os.environ.get("RESCUE_SHARED_DIR") or Path(__file__).resolve().parents[1] / ".." / "shared") / "data"
SLICES = ("rescue-bench-subset", "rescue-bench-more", "rescue-bench-extra")
#: the figure reported per task (key of the task runner's metrics)
FIGURE = {"itp": "f1", "stp": "recall_at_1", "ssp": "recall_at_1"}


def table(result: dict, tasks: list[str]) -> str:
    """Per task and scenario: prior %, majority %, instances, prior ≥ majority; for the
    rankings (R@1: instances answered right) also the counts right, the discordant pairs
    (right by the prior only : by the majority only) and the exact McNemar p of the
    difference (:func:`~rescue_env.agents.prior.paired_counts`)."""
    from scipy.stats import binomtest

    rows = []
    for task in tasks:
        for scn in ("couple", "family"):
            cells = [result[p][task].get("by_scenario", {}).get(scn) for p in ("prior", "majority")]
            if not all(cells):
                continue
            prior, major = (100 * c[FIGURE[task]] for c in cells)
            row = [f"{task.upper()} {FIGURE[task]}", scn, f"{prior:.1f}", f"{major:.1f}", cells[0]["n"], "yes" if prior >= major - 1e-9 else "NO"]
            pc = result.get("paired", {}).get(task, {}).get(scn)
            if task != "itp" and pc:  # F1 is not a count of instances answered right
                b, c = pc["prior_only"], pc["majority_only"]
                p = binomtest(b, b + c).pvalue if b + c else 1.0
                row += [f"{pc['prior']} / {pc['majority']}", f"{b} : {c}", f"{p:.2f}"]
            else:
                row += ["", "", ""]
            rows.append(row)
    headers = ["figure", "scenario", "prior %", "majority %", "instances", "prior ≥ majority", "right (prior / majority)", "discordant", "McNemar p"]
    return tabulate(rows, headers=headers, disable_numparse=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", default="itp,stp,ssp", help=f"comma-separated, of {','.join(FIGURE)} (the tasks the prior answers)")
    ap.add_argument("--profile", default="paper", choices=PROFILES, help="instance sets: the paper's protocol or the released scripts'")
    ap.add_argument("--json", type=Path, help="write the full figures here too")
    args = ap.parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks or set(tasks) - set(FIGURE):
        ap.error(f"--tasks {args.tasks!r}: choose from {', '.join(FIGURE)}")
    missing = [str(SHARED / s) for s in SLICES if not (SHARED / s).exists()]
    if missing:
        ap.error(f"the real slices are not there: {', '.join(missing)} (set RESCUE_SHARED_DIR to the folder holding data/)")
    dialogues = load_dialogues([SHARED / s for s in SLICES])
    t0 = time.perf_counter()
    result = cross_validate(dialogues, tasks=tasks, profile=args.profile)
    print(f"leave-one-group-out over {len(result['folds'])} groups, {len(dialogues)} dialogues ({time.perf_counter() - t0:.0f} s)")
    print(table(result, tasks))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
