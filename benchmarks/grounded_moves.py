"""What a trained policy answers on the held-out real dialogues, against the real therapists.

Run: ``python benchmarks/grounded_moves.py RUN [RUN ...]`` (folders of ``rescue train
experiment=grounded`` runs; ``RESCUE_SHARED_DIR`` names ``shared`` where the real slices are).

``real_agreement`` in a run's ``metrics.json`` says how often the policy's first answer is the
therapist's (STP/SSP R@1); this says what the answers are. For each run: its ``prior.coef`` /
``prior.strategy_coef`` and σ* margin, then for STP the target *roles* of the policy's first
answers and of the gold (``speaker1``: the client who spoke last, ``speaker2``: the one before,
``group``, ``dyad``, ``silent``; the majority baseline's roles) and for SSP the strategies, with
the instances answered right. The held-out dialogues are those the run recorded (its data split),
read from the three real slices. It shows where the σ* a policy earns comes from, e.g. a
policy trained on σ* alone addressing the whole couple with ``join`` on every turn.

Then the same roles and strategies of the policy's moves **in the simulator** (its held-out
episodes, the run's env settings, ``--sim-steps`` steps of 8 sessions): a policy held to the
therapists only on real states (``prior.demo_coef``) could act one way there and another
where σ* is earned; this says whether it does.
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path

from rescue_env.agents.sb3 import SB3Agent
from rescue_env.data import load_dialogues
from rescue_env.tasks.instances import build_instances
from rescue_env.tasks.predictors import AgentPredictor, target_role

SHARED = Path(os.environ.get("RESCUE_SHARED_DIR") or Path(__file__).resolve().parents[1] / ".." / "shared") / "data"
SLICES = ("rescue-bench-subset", "rescue-bench-more", "rescue-bench-extra")


def counts(run: Path, dialogues: dict, scenario: str = "couple") -> dict[str, dict]:
    """``{task: {"policy": Counter, "gold": Counter, "right": int, "n": int}}`` of one run on
    its held-out real dialogues (STP counted by target role, SSP by strategy)."""
    from sb3_contrib import MaskablePPO

    metrics = json.loads((run / "metrics.json").read_text())
    held = [dialogues[i] for i in metrics["real_agreement"]["dialogues"] if dialogues[i].scenario == scenario]
    model = MaskablePPO.load(run / "model.zip", device="cpu")
    predictor = AgentPredictor(SB3Agent(model, scenario, deterministic=True), name="policy")
    out: dict[str, dict] = {}
    for task in ("stp", "ssp"):
        predictor.prepare(task, "paper", held)
        c: dict = {"policy": Counter(), "gold": Counter(), "right": 0, "n": 0}
        for inst in build_instances(held, task, "paper"):
            top = predictor.predict(task, inst).value[0]
            role = (lambda label: target_role(label, inst)) if task == "stp" else (lambda label: label)
            c["policy"][role(top)] += 1
            c["gold"][role(inst.gold)] += 1
            c["right"] += top == inst.gold
            c["n"] += 1
        out[task] = c
    return out


def simulated(run: Path, dialogues: dict, steps: int, scenario: str = "couple") -> dict:
    """The run's ``sim_agreement`` (:func:`~rescue_env.experiments.train.simulated_agreement`)
    recomputed with ``steps`` steps of each of 8 sessions: its policy on its held-out
    dialogues, with its env settings and its saved prior."""
    from omegaconf import OmegaConf
    from sb3_contrib import MaskablePPO

    from rescue_env.agents.prior import BehaviourPrior
    from rescue_env.experiments.train import simulated_agreement

    metrics = json.loads((run / "metrics.json").read_text())
    held = [dialogues[i] for i in metrics["eval_dialogues"] if dialogues[i].scenario == scenario]
    model = MaskablePPO.load(run / "model.zip", device="cpu")
    prior = BehaviourPrior.load(metrics["grounding"]["path"])
    return simulated_agreement(OmegaConf.load(run / ".hydra" / "config.yaml"), model, prior, held, steps)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders of rescue train experiment=grounded (metrics.json, model.zip)")
    ap.add_argument("--sim-steps", type=int, default=200, help="steps of each of 8 simulated sessions (0: real dialogues only)")
    args = ap.parse_args(argv)
    bad = [str(r) for r in args.runs if not ((r / "metrics.json").exists() and (r / "model.zip").exists())]
    if bad:
        ap.error(f"not a finished grounded run (no metrics.json and model.zip): {', '.join(bad)}")
    missing = [str(SHARED / s) for s in SLICES if not (SHARED / s).exists()]
    if missing:
        ap.error(f"the real slices are not there: {', '.join(missing)} (set RESCUE_SHARED_DIR to the folder holding data/)")
    dialogues = {d.sample_id: d for d in load_dialogues([SHARED / s for s in SLICES])}
    for run in args.runs:
        m = json.loads((run / "metrics.json").read_text())
        g = m.get("grounding") or {}
        if not m.get("real_agreement"):
            ap.error(f"{run}: metrics.json has no real_agreement (train with prior.agreement=true)")
        print(f"{run}: prior.coef={g.get('coef')} strategy_coef={g.get('strategy_coef')} σ* margin {m['sigma_margin_vs_heuristic']:+.2f}")
        for task, c in counts(run, dialogues).items():
            what = "target role" if task == "stp" else "strategy"
            print(f"  {task.upper()} right {c['right']}/{c['n']}; policy's first {what}: {dict(c['policy'].most_common())}")
            print(f"  {' ' * len(task)} therapists': {dict(c['gold'].most_common())}")
        if args.sim_steps:
            sim = simulated(run, dialogues, args.sim_steps)
            for task, key in (("stp", "target_roles"), ("ssp", "strategies")):
                print(f"  {task.upper()} in the simulator, {sim['moves']} moves: { {k: f'{v:.0f}%' for k, v in sim[key].items()} }")
            print(f"  the prior's most probable move in the simulator: target {sim['prior_target_r1']:.0f}%, strategy {sim['prior_strategy_r1']:.0f}% of the policy's")


if __name__ == "__main__":
    main()
