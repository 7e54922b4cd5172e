"""The simulator's fidelity figures on real data (issue 12's table), before/after a model change.

Run: ``python benchmarks/fidelity_figures.py [--heterogeneity 1.0] [--sim-draws 50] [--folds 5]``.

Prints, per scenario, for (a) k-fold over the bundled seeds + ``../shared`` real subset and
(b) fitted on seeds + subset, scored on ``../shared/data/rescue-bench-more`` (dialogues
never fitted): pattern log-likelihood gain, moves, coverage_90, coverage_50, sd_ratio, dwell
time and the paper's transition shares. Needs ``../shared/data``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rescue_env.data import load_dialogues
from rescue_env.dynamics.fidelity import evaluate_fidelity, evaluate_holdout

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heterogeneity", type=float, default=1.0)
    ap.add_argument("--sim-draws", type=int, default=50)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    train = load_dialogues(None) + load_dialogues(SHARED / "rescue-bench-subset")
    more = load_dialogues(SHARED / "rescue-bench-more")
    print(f"{'split':8} {'scenario':8} {'dlg':>4} {'trans':>5} {'gain':>6} {'moves':>5} {'cov90':>6} {'cov50':>6} {'sdratio':>7} {'dwell r/s':>11}  facts real/sim")
    for split in ("kfold", "holdout"):
        for scenario in ("couple", "family"):
            t0 = time.perf_counter()
            kw = dict(seed=args.seed, sim_draws=args.sim_draws, heterogeneity=args.heterogeneity)
            r = evaluate_fidelity(train, scenario, folds=args.folds, **kw) if split == "kfold" else evaluate_holdout(train, more, scenario, **kw)
            facts = "; ".join(
                f"{k.split('->')[1][:6]} {v['real'] if v['real'] is None else round(v['real'], 2)}/{v['simulated'] if v['simulated'] is None else round(v['simulated'], 2)}"
                for k, v in r.transition_facts.items()
            )
            dw = r.dwell_time
            print(
                f"{split:8} {scenario:8} {r.dialogues:4d} {r.transitions:5d} {r.gain:+6.2f} {r.moves:5d} {r.coverage_90:6.2f} {r.coverage_50:6.2f} "
                f"{r.sd_ratio:7.2f} {dw.get('real', float('nan')):5.2f}/{dw.get('simulated', float('nan')):5.2f}  {facts}  ({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
