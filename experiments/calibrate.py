"""``rescue calibrate``: fit the calibrated client model on ``data.path`` and report fidelity.

``rescue calibrate data.path=TRAIN holdout.path=HELDOUT`` fits on TRAIN and scores HELDOUT
(``fidelity.json``'s ``holdout`` section); without ``holdout.path`` it scores k-fold over
TRAIN (``kfold``). Per scenario: dialogues, transitions, loglik_gain_nats, moves,
coverage_90 / coverage_50 (share of real distress changes inside the simulated 5–95 % /
25–75 % band of the same move from the same state), sd_ratio, dwell_time and
transition_facts (the paper's three shares, real vs simulated).

Per scenario also ``effects`` (per strategy: held-out moves ``n``, the real mean change of
the addressed member and its standard error, the simulated mean, ``z`` = their gap in
standard errors) and ``trajectory`` (the real therapist's moves replayed open loop for 1, 3
and 6 steps from real states: the worst-off member's coverage, the variogram ratio, the
pattern change rate and occupancy, the stance drift; :mod:`rescue_env.dynamics.fidelity`).

``data.path`` and ``holdout.path`` may name several data sets (``data.path=[A,B]`` or a
directory of ``.jsonl`` files); the parameter file's provenance lists each with its sha256.
A hold-out that shares a sample id with ``data.path`` is refused (exit 2, naming the ids):
its figures would be scored on training data.

Writes to the run folder: the parameter file (``dynamics_params.json``, usable as
``dynamics.params=...``), ``fidelity.json`` and ``fidelity.png``; prints the fidelity table.
"""

from __future__ import annotations

import json
import logging
import time

import hydra
from omegaconf import DictConfig

from rescue_env.experiments.common import load_data, run_dir
from rescue_env.experiments.config import register_configs
from rescue_env.experiments.errors import UserError, user_errors
from rescue_env.atomic import atomic_write_text
from rescue_env.data import data_sources, group_cap
from rescue_env.dynamics.fidelity import evaluate_fidelity, evaluate_holdout, format_fidelity, plot_fidelity
from rescue_env.dynamics.fit import fit_params

log = logging.getLogger(__name__)
register_configs()


def check_disjoint(train: list, heldout: list) -> None:
    """Refuse a hold-out that shares sample ids with the training data (a user error)."""
    shared = sorted({d.sample_id for d in train} & {d.sample_id for d in heldout})
    if shared:
        more = f" and {len(shared) - 10} more" if len(shared) > 10 else ""
        raise UserError(
            f"holdout.path shares {len(shared)} sample id(s) with data.path: {', '.join(shared[:10])}{more}; "
            "held-out fidelity must be scored on dialogues the fit has not seen: remove them from one of the two"
        )


@hydra.main(version_base="1.3", config_path="pkg://rescue_env.conf", config_name="calibrate")
@user_errors
def main(cfg: DictConfig) -> None:
    t0 = time.perf_counter()
    out = run_dir()
    dialogues, source = load_data(cfg.data.path, cfg.data.strict)
    heldout, held_source = load_data(cfg.holdout.path, cfg.holdout.strict) if cfg.holdout.path else ([], None)
    check_disjoint(dialogues, heldout)  # before anything is written
    sources = data_sources(cfg.data.path, dialogues)
    params = fit_params(dialogues, sources=[f"{s['path']}: {s['dialogues']} dialogues" for s in sources])
    params.provenance["data"] = sources
    # the fit uses every member of every group; say which groups an env of today's default size cannot play
    for d in dialogues:
        n = len(d.participants)
        if n > group_cap(d.scenario):
            print(f"note: {d.scenario} sample {d.sample_id!r} has {n} members ({', '.join(d.participants)}): fitted on all of them; "
                  f"an env plays it only with env.max_members>={n}")
    path = params.save(out / cfg.output)
    kw = dict(seed=cfg.seed, sim_draws=cfg.sim_draws, heterogeneity=cfg.heterogeneity)
    if cfg.holdout.path:
        section = "holdout"
        results = [evaluate_holdout(dialogues, heldout, s, **kw) for s in ("couple", "family")]
    else:
        section = "kfold"
        results = [evaluate_fidelity(dialogues, s, folds=cfg.folds, **kw) for s in ("couple", "family")]
    results = [r for r in results if r.dialogues]
    table = format_fidelity(results)
    print(table)
    report = {
        "source": source,
        **({"holdout_source": held_source} if held_source else {}),
        section: {r.scenario: r.summary() for r in results},
        "scenarios": [r.to_dict() for r in results],
    }
    atomic_write_text(out / "fidelity.json", json.dumps(report, indent=1))
    if results:
        plot_fidelity(results, out / "fidelity.png")
    small = [f"{r.scenario}: {r.dialogues} dialogues" for r in results if r.dialogues < 30]
    if small:
        print(f"caveat: small data ({', '.join(small)}); held-out figures are noisy")
    print(f"parameters: {path}\nfidelity: {out / 'fidelity.json'}, {out / 'fidelity.png'}  ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
