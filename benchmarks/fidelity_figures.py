"""The simulator's fidelity figures on real data, before/after a model change.

Run: ``python benchmarks/fidelity_figures.py [--heterogeneity 1.0] [--sim-draws 50] [--folds 5]
[--with-seeds] [--json FILE]``.

k-fold by group (a couple's or family's sessions leave together) over the three real slices
of ``../shared/data`` (subset, more, extra; the bundled seeds added with ``--with-seeds``),
per scenario: one step (pattern log-likelihood gain, moves, coverage_90, coverage_50,
sd_ratio), the strategy effects (n, real mean ± se, simulated mean, z) and the whole-session
check (coverage_90_worst and variogram ratio at h = 1, 3, 6; pattern change rate real/sim,
pattern_tvd, stance drift real/sim), each against its target. Needs ``../shared/data``
(``RESCUE_SHARED_DIR`` names ``shared`` elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from rescue_env.data import load_dialogues
from rescue_env.dynamics.fidelity import evaluate_fidelity, format_fidelity

SHARED = Path(os.environ.get("RESCUE_SHARED_DIR") or Path(__file__).resolve().parents[1] / ".." / "shared") / "data"
SLICES = ("rescue-bench-subset", "rescue-bench-more", "rescue-bench-extra")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heterogeneity", type=float, default=1.0)
    ap.add_argument("--sim-draws", type=int, default=50)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--with-seeds", action="store_true", help="add the bundled seeds to the real slices")
    ap.add_argument("--json", type=Path, help="write the summaries here too")
    args = ap.parse_args(argv)
    dialogues = load_dialogues([SHARED / s for s in SLICES]) + (load_dialogues(None) if args.with_seeds else [])
    t0 = time.perf_counter()
    kw = dict(seed=args.seed, sim_draws=args.sim_draws, heterogeneity=args.heterogeneity)
    results = [evaluate_fidelity(dialogues, s, folds=args.folds, **kw) for s in ("couple", "family")]
    print(format_fidelity(results))
    print(f"({time.perf_counter() - t0:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({r.scenario: r.summary() for r in results}, indent=1))


if __name__ == "__main__":
    main()
