"""How faithful is the calibrated model? Held-out checks of DESIGN.md §7.

For each scenario, dialogues are split into k folds; the model is fitted on k−1 folds and
scored on the held-out one:

- **pattern log-likelihood**: mean log-probability per transition of the held-out pattern
  sequences (with the therapist's actual moves) under the fitted ``transition`` tables,
  against a marginal-frequency baseline (next pattern drawn from the training labels'
  frequencies, add-one smoothed). Higher is better; the gap is the model's gain in nats.
- **distress change after each strategy**: for every held-out therapist move whose
  addressed member is annotated before and within a few rows after, the real change of
  that member's distress, and the change the fitted model simulates for the same move from
  the same extracted state (``sim_draws`` draws each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rescue_env.atomic import save_figure
from rescue_env.data.schema import Dialogue
from rescue_env.dynamics.base import TherapistMove
from rescue_env.dynamics.calibrated import CalibratedModel
from rescue_env.dynamics.fit import EFFECT_WINDOW, PriorStrength, extract_transitions, fit_scenario
from rescue_env.dynamics.priors import pattern_states
from rescue_env.state import StateTracker
from rescue_env.taxonomy.labels import strategies


@dataclass
class ScenarioFidelity:
    """Held-out fidelity figures of one scenario."""

    scenario: str
    dialogues: int
    folds: int
    transitions: int = 0
    loglik_model: float = float("nan")
    loglik_baseline: float = float("nan")
    #: strategy -> {"n", "real_mean", "real_sd", "sim_mean", "sim_sd"} and the raw deltas
    distress_change: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: held-out dialogues whose group the model cannot simulate whole (their transitions are
    #: scored, their distress changes are not: never on a group cut to size)
    not_simulated: list[str] = field(default_factory=list)

    @property
    def gain(self) -> float:
        return self.loglik_model - self.loglik_baseline

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "dialogues": self.dialogues,
            "folds": self.folds,
            "transitions": self.transitions,
            "loglik_per_transition_model": self.loglik_model,
            "loglik_per_transition_baseline": self.loglik_baseline,
            "gain_nats": self.gain,
            "distress_change": self.distress_change,
            "not_simulated": self.not_simulated,
        }


def _folds(n: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    order = rng.permutation(n)
    return [order[i::k] for i in range(k)]


def _real_and_simulated(
    dialogue: Dialogue, model: CalibratedModel, rng: np.random.Generator, sim_draws: int
) -> list[tuple[int, float, list[float]]]:
    """(strategy, real change, simulated changes) per addressed annotated member."""
    strats = strategies(dialogue.scenario)
    tracker = StateTracker(dialogue.scenario, dialogue.participants)
    rows = dialogue.rows
    before_states = []
    annotated_at: list[dict[int, float]] = []
    for row in rows:
        before_states.append(tracker.state.copy())
        st = tracker.update(row)
        annotated_at.append({tracker.index[e.person]: float(st.distress[tracker.index[e.person]]) for e in row.internal_emotion if e.person in tracker.index})
    out = []
    for pos, row in enumerate(rows):
        if not row.is_therapist or row.strategy not in strats:
            continue
        s = strats.index(row.strategy)
        targets = list(row.target)
        for item in row.support_strategy:
            targets.extend(item.target)
        slots = tuple(sorted(tracker.addressed_slots(targets)))
        if not slots:
            continue
        before = before_states[pos]
        for i in slots:
            if math.isnan(before.intensity[i]):
                continue
            after = next((a[i] for a in annotated_at[pos + 1 : pos + 1 + EFFECT_WINDOW] if i in a), None)
            if after is None:
                continue
            distress, _ = model.simulate(before, TherapistMove(True, None, slots, s, row.strategy), sim_draws, rng)
            sims = (distress[:, i] - before.distress[i]).tolist()
            out.append((s, after - float(before.distress[i]), sims))
    return out


def evaluate_fidelity(
    dialogues: list[Dialogue], scenario: str, *, folds: int = 5, seed: int = 0, sim_draws: int = 20, strength: PriorStrength = PriorStrength()
) -> ScenarioFidelity:
    """k-fold held-out fidelity of the calibrated model for one scenario."""
    ds = [d for d in dialogues if d.scenario == scenario]
    k = max(2, min(folds, len(ds))) if len(ds) >= 2 else 0
    result = ScenarioFidelity(scenario, len(ds), k)
    if k == 0:
        return result
    rng = np.random.default_rng(seed)
    strats = strategies(scenario)
    n_states = len(pattern_states(scenario))
    ll_model: list[float] = []
    ll_base: list[float] = []
    real: dict[int, list[float]] = {s: [] for s in range(len(strats))}
    sim: dict[int, list[float]] = {s: [] for s in range(len(strats))}
    for held in _folds(len(ds), k, rng):
        held_set = set(int(i) for i in held)
        train = [d for i, d in enumerate(ds) if i not in held_set]
        test = [d for i, d in enumerate(ds) if i in held_set]
        params, _ = fit_scenario(train, scenario, strength)
        marginal = np.ones(n_states)
        for d in train:
            for t in extract_transitions(d):
                marginal[t.dst] += 1
        marginal /= marginal.sum()
        model = CalibratedModel(scenario, params)
        for d in test:
            for t in extract_transitions(d):
                ll_model.append(math.log(params.transition[t.action, t.src, t.dst]))
                ll_base.append(math.log(marginal[t.dst]))
            cap = model.encoding(len(d.participants)).max_members
            if len(d.participants) > cap:
                # the model cannot simulate this group whole; a cut group would be another session
                result.not_simulated.append(f"{d.sample_id} ({len(d.participants)} members; the {scenario} model simulates {cap})")
                continue
            for s, delta, sims in _real_and_simulated(d, model, rng, sim_draws):
                real[s].append(delta)
                sim[s].extend(sims)
    result.transitions = len(ll_model)
    if ll_model:
        result.loglik_model = float(np.mean(ll_model))
        result.loglik_baseline = float(np.mean(ll_base))
    for s, name in enumerate(strats):
        r, m = real[s], sim[s]
        result.distress_change[name] = {
            "n": len(r),
            "real_mean": float(np.mean(r)) if r else None,
            "real_sd": float(np.std(r)) if r else None,
            "sim_mean": float(np.mean(m)) if m else None,
            "sim_sd": float(np.std(m)) if m else None,
            "real": [round(x, 4) for x in r],
            "sim": [round(x, 4) for x in m],
        }
    return result


def format_fidelity(results: list[ScenarioFidelity]) -> str:
    """Printable tables: log-likelihood per transition, then distress change per strategy."""
    from tabulate import tabulate

    head = [
        [r.scenario, r.dialogues, r.folds, r.transitions, f"{r.loglik_model:.3f}", f"{r.loglik_baseline:.3f}", f"{r.gain:+.3f}"]
        for r in results
    ]
    out = [
        "Held-out pattern log-likelihood per transition (k-fold over dialogues)",
        tabulate(head, headers=["scenario", "dialogues", "folds", "transitions", "model", "marginal baseline", "gain (nats)"]),
        "",
        "Distress change of the addressed member after each strategy: real (held-out) vs simulated",
    ]
    rows = []
    for r in results:
        for name, v in r.distress_change.items():
            if v["n"]:
                rows.append([r.scenario, name, v["n"], f"{v['real_mean']:+.3f} ± {v['real_sd']:.3f}", f"{v['sim_mean']:+.3f} ± {v['sim_sd']:.3f}"])
            else:
                rows.append([r.scenario, name, 0, "-", "-"])
    out.append(tabulate(rows, headers=["scenario", "strategy", "n real", "real mean ± sd", "simulated mean ± sd"]))
    for r in results:
        if r.not_simulated:
            out.append(f"{r.scenario}: distress change not simulated for {', '.join(r.not_simulated)}")
    return "\n".join(out)


def plot_fidelity(results: list[ScenarioFidelity], path: str | Path) -> Path:
    """Box plots of real vs simulated distress change per strategy, one panel per scenario."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(11, 3.6 * len(results)), squeeze=False)
    for ax, r in zip(axes[:, 0], results):
        names = list(r.distress_change)
        positions, data, colors = [], [], []
        for k, name in enumerate(names):
            v = r.distress_change[name]
            for off, key, color in ((-0.18, "real", "#4c72b0"), (0.18, "sim", "#dd8452")):
                if not v[key]:  # no held-out observation of this strategy: leave the slot empty
                    continue
                positions.append(k + off)
                data.append(v[key])
                colors.append(color)
        if not data:
            ax.text(0.5, 0.5, f"{r.scenario}: too few dialogues for held-out checks ({r.dialogues})", ha="center", transform=ax.transAxes)
            ax.set_axis_off()
            continue
        parts = ax.boxplot(data, positions=positions, widths=0.3, patch_artist=True, showfliers=False)
        for patch, color in zip(parts["boxes"], colors):
            patch.set_facecolor(color)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xticks(range(len(names)), [f"{n}\n(n={r.distress_change[n]['n']})" for n in names], fontsize=8)
        ax.set_ylabel("Δ distress")
        ax.set_title(f"{r.scenario}: real (blue) vs simulated (orange); pattern LL gain {r.gain:+.3f} nats/transition", fontsize=10)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out, dpi=100)
    plt.close(fig)
    return out
