"""Can a policy tell the simulator's states from real ones? A classifier on the observations.

Run: ``python benchmarks/sim_vs_real.py RUN [RUN ...]`` (folders of ``rescue train
experiment=grounded`` runs; ``RESCUE_SHARED_DIR`` names ``shared`` where the real slices are).

A grounded policy is held to the therapists on two kinds of states: the simulator's (the KL
to π_prior) and the real dialogues' (behaviour cloning, ``prior.demo_coef``); it is scored on
real ones (STP/SSP) and earns its σ* on simulated ones. Where the two kinds are told apart
easily, a policy can answer real states like a therapist and act otherwise in the simulator
(``sim_agreement`` in ``metrics.json`` shows whether it does). This fits a logistic regression
(scikit-learn, standardised) on the observations the policy saw in the simulator (its
held-out dialogues, 8 sessions, four horizons each) against the observations of the real
decisions of the run's dialogues (every couple or family of the three slices), scores it by
a 5-fold cross-validated ROC AUC (0.5: indistinguishable), once with the real states as
observed (an episode's start: clock 0) and once with their clock drawn as training draws it
(:func:`~rescue_env.agents.grounded.random_clock`), and prints, per observation key, how far
its features alone separate the two in the second case (the same AUC with that key's
columns only).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

SHARED = Path(os.environ.get("RESCUE_SHARED_DIR") or Path(__file__).resolve().parents[1] / ".." / "shared") / "data"
SLICES = ("rescue-bench-subset", "rescue-bench-more", "rescue-bench-extra")


def observations(run: Path, dialogues: list, steps_per_horizon: int = 4) -> tuple[np.ndarray, np.ndarray, object]:
    """``(simulated obs, real obs, observer)`` of a run: the policy's observations in the
    simulator on its held-out dialogues, and those of the real therapists' decisions."""
    from omegaconf import OmegaConf
    from sb3_contrib import MaskablePPO

    from rescue_env.agents.grounded import real_moves, simulated_moves
    from rescue_env.envs.vec_env import GroupSupportVecEnv
    from rescue_env.experiments.train import env_kwargs

    cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
    metrics = json.loads((run / "metrics.json").read_text())
    scenario = cfg.env.scenario
    by_id = {d.sample_id: d for d in dialogues}
    held = [by_id[i] for i in metrics["eval_dialogues"]]
    model = MaskablePPO.load(run / "model.zip", device="cpu")
    venv = GroupSupportVecEnv(num_envs=8, seed=int(cfg.seed) + 30_000, data_path=held, **env_kwargs(cfg))
    # the episodes of the run's sim_agreement (train.simulated_agreement: the same venv seed)
    sim = simulated_moves(model, venv, steps_per_horizon * int(cfg.env.horizon), keep_observations=True)["observations"]
    observer, encoding = venv.observer, venv.encoding
    venv.close()
    playable = [d for d in dialogues if d.scenario == scenario and len(d.participants) <= encoding.max_members]
    real, _, _ = real_moves(playable, observer, encoding, after_therapist=False)  # the states the simulator can show
    return sim, real, observer


def auc(X: np.ndarray, y: np.ndarray, seed: int = 0) -> float:
    """5-fold cross-validated ROC AUC of a standardised logistic regression."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=2000))
    folds = StratifiedKFold(5, shuffle=True, random_state=seed)
    return float(np.mean(cross_val_score(model, X, y, cv=folds, scoring="roc_auc")))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders of rescue train experiment=grounded (metrics.json, model.zip)")
    args = ap.parse_args(argv)
    bad = [str(r) for r in args.runs if not ((r / "metrics.json").exists() and (r / "model.zip").exists() and (r / ".hydra").exists())]
    if bad:
        ap.error(f"not a finished rescue train run (no metrics.json, model.zip, .hydra/): {', '.join(bad)}")
    missing = [str(SHARED / s) for s in SLICES if not (SHARED / s).exists()]
    if missing:
        ap.error(f"the real slices are not there: {', '.join(missing)} (set RESCUE_SHARED_DIR to the folder holding data/)")
    from rescue_env.agents.grounded import random_clock
    from rescue_env.data import load_dialogues

    dialogues = load_dialogues([SHARED / s for s in SLICES])
    for run in args.runs:
        sim, real, observer = observations(run, dialogues)
        y = np.r_[np.zeros(len(sim)), np.ones(len(real))]
        print(f"{run}: {len(sim)} simulated observations, {len(real)} real; sim-vs-real AUC {auc(np.concatenate([sim, real]), y):.3f} "
              "with real states at an episode's start, as observed (0.5: indistinguishable)")
        # as behaviour cloning and the demonstration term see them: the clock drawn
        X = np.concatenate([sim, random_clock(real, observer, np.random.default_rng(0))])
        print(f"  with the real states' clock drawn (random_clock): AUC {auc(X, y):.3f}")
        per_key = []
        for key in observer.space.spaces:
            cols = X[:, observer.columns(key)]
            if np.ptp(cols, axis=0).max() > 0:
                per_key.append((auc(cols, y), key))
        print("  by observation key alone: " + ", ".join(f"{k} {a:.2f}" for a, k in sorted(per_key, reverse=True)))


if __name__ == "__main__":
    main()
