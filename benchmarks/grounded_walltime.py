"""Wall time of ``rescue train experiment=grounded`` against ``experiment=train_small``, on the
same data and seed, measured back to back in this run (the issue's target: ≤ 2×).

Run: ``python benchmarks/grounded_walltime.py [--rounds 1] [--grounded OVERRIDE ...] [--] [OVERRIDE ...]``, e.g.
``python benchmarks/grounded_walltime.py --rounds 2 --grounded prior.coef=0.3 prior.strategy_coef=0.03 prior.real_coef=0.3 -- 'data.path=[../shared/data/rescue-bench-subset,../shared/data/rescue-bench-more,../shared/data/rescue-bench-extra]' env.max_members=3``
(``--`` ends ``--grounded``'s list).

Each round runs the two commands one after the other (the order alternates between rounds, so
a machine growing busier does not favour one), each a fresh ``rescue train`` process in a
temporary run directory with ``eval_freq=0`` (the periodic evaluation is the same work in
both), the given overrides and, for the grounded run, any ``prior.*`` override given after
``--grounded``. Prints each process's wall time and the ratio per round: the grounded run's
whole cost (fitting the prior, behaviour cloning, the penalty in every PPO minibatch, the
agreement scoring at the end) against plain MaskablePPO's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed_train(experiment: str, overrides: list[str], run_dir: Path) -> float:
    """Seconds of wall time of one ``rescue train experiment=...`` process; exits on failure."""
    cmd = [sys.executable, "-m", "rescue_env.experiments.console", "train", f"experiment={experiment}", "eval_freq=0", f"hydra.run.dir={run_dir}", *overrides]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1, help="pairs of runs (the order alternates)")
    parser.add_argument("--grounded", nargs="*", default=[], metavar="OVERRIDE", help="overrides for the grounded run only (prior.coef=...)")
    parser.add_argument("overrides", nargs="*", help="overrides for both runs (data.path=..., env.max_members=3, seed=0)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    print(f"{'round':<7}{'train_small s':>15}{'grounded s':>13}{'ratio':>8}")
    ratios = []
    with tempfile.TemporaryDirectory(prefix="grounded-walltime-") as tmp:
        for r in range(args.rounds):
            order = ["train_small", "grounded"] if r % 2 == 0 else ["grounded", "train_small"]
            walls = {}
            for exp in order:
                extra = args.overrides + (args.grounded if exp == "grounded" else [])
                walls[exp] = timed_train(exp, extra, Path(tmp) / f"{exp}-{r}")
            ratios.append(walls["grounded"] / walls["train_small"])
            print(f"{r:<7}{walls['train_small']:>15.1f}{walls['grounded']:>13.1f}{ratios[-1]:>7.2f}x", flush=True)
    print(f"grounded / train_small: {min(ratios):.2f}x to {max(ratios):.2f}x over {len(ratios)} round(s) (target <= 2x)")


if __name__ == "__main__":
    main()
