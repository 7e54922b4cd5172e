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
  the same extracted state (``sim_draws`` draws each);
- **strategy effects** (:func:`strategy_effects`): per strategy, the simulated mean change of
  the addressed member against the real mean, in standard errors of the real mean;
- **whole sessions** (:class:`_Trajectories`): the real therapist's moves replayed open loop
  for ``HORIZONS`` steps from each real state (a real dialogue is cut into steps as
  :mod:`rescue_env.dynamics.replay` says: a step is a therapist row and the client rows up to
  the next; a row without a strategy is a listening step), the simulated draws against what
  really followed: the worst-off member's reading at t+h against the simulated 5–95 % band,
  the variance of its h-step change (a variogram), the pattern change rate and occupancy,
  and the stance drift.

Folds hold out whole groups (:func:`~rescue_env.data.groups.session_groups`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rescue_env.atomic import save_figure
from rescue_env.data.schema import Dialogue
from rescue_env.dynamics.calibrated import CalibratedModel
from rescue_env.data.groups import session_groups
from rescue_env.dynamics.fit import PriorStrength, extract_transitions, fit_scenario
from rescue_env.dynamics.priors import pattern_states
from rescue_env.dynamics.replay import extract_moves, extract_steps, move_action, replay, simulate_moves
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
    #: held-out moves scored for distress change (real change and simulated draws per move)
    moves: int = 0
    #: share of real changes inside the simulated 5–95 % / 25–75 % band of their own move
    coverage_90: float = float("nan")
    coverage_50: float = float("nan")
    #: simulated / real sd of the changes (all moves pooled)
    sd_ratio: float = float("nan")
    #: nominal central-band level -> share of real changes inside (the calibration curve)
    calibration: dict[str, float] = field(default_factory=dict)
    #: mean pattern duration in labelled transitions, real vs the model's (1 / (1 − stay))
    dwell_time: dict[str, float] = field(default_factory=dict)
    #: the paper's three transition shares (of pattern changes), real vs simulated
    transition_facts: dict[str, dict[str, float | int | None]] = field(default_factory=dict)
    #: per strategy with held-out moves: n, real_mean, real_se, sim_mean, z (:func:`strategy_effects`)
    effects: list[dict[str, Any]] = field(default_factory=list)
    #: the whole-session check (:class:`_Trajectories`); empty without held-out windows
    trajectory: dict[str, Any] = field(default_factory=dict)
    #: horizon -> (real changes of the worst-off reading, simulated ones pooled), for the figure
    trajectory_changes: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, repr=False)

    @property
    def gain(self) -> float:
        return self.loglik_model - self.loglik_baseline

    def summary(self) -> dict[str, Any]:
        """The headline figures of ``fidelity.json``'s ``holdout`` / ``kfold`` sections."""
        return {
            "dialogues": self.dialogues,
            "transitions": self.transitions,
            "loglik_gain_nats": self.gain,
            "moves": self.moves,
            "coverage_90": self.coverage_90,
            "coverage_50": self.coverage_50,
            "sd_ratio": self.sd_ratio,
            "calibration": self.calibration,
            "dwell_time": self.dwell_time,
            "transition_facts": self.transition_facts,
            "effects": self.effects,
            "trajectory": self.trajectory,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "dialogues": self.dialogues,
            "folds": self.folds,
            "transitions": self.transitions,
            "loglik_per_transition_model": self.loglik_model,
            "loglik_per_transition_baseline": self.loglik_baseline,
            "gain_nats": self.gain,
            **{k: v for k, v in self.summary().items() if k not in ("dialogues", "transitions")},
            "distress_change": self.distress_change,
            "not_simulated": self.not_simulated,
        }


def _group_folds(dialogues: list[Dialogue], k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Dialogue indices of ``k`` folds that keep each group's sessions together
    (:func:`~rescue_env.data.groups.session_groups`): groups in random order, each to the
    fold with the fewest dialogues so far (folds stay balanced when one group has many)."""
    groups = session_groups(dialogues)
    names = sorted(set(groups.values()))
    members = {g: [i for i, d in enumerate(dialogues) if groups[d.sample_id] == g] for g in names}
    folds: list[list[int]] = [[] for _ in range(k)]
    for g in sorted((names[i] for i in rng.permutation(len(names))), key=lambda g: -len(members[g])):
        min(folds, key=len).extend(members[g])
    return [np.array(sorted(f), dtype=int) for f in folds if f]


#: the paper's transition facts (DESIGN.md §1): (from, to, share of changes out of ``from``)
PAPER_FACTS = (
    ("pursue_withdraw", "repair_softening", 0.50),
    ("pursue_withdraw", "constructive_alignment", 0.07),
    ("repair_softening", "attack_attack", 0.35),
)
#: nominal levels of the calibration curve (central bands of the simulated draws)
CALIBRATION_LEVELS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


#: horizons of the whole-session check, in steps
HORIZONS = (1, 3, 6)


def strategy_effects(real: dict[int, list[float]], sim_means: dict[int, list[float]], names: list[str]) -> list[dict[str, Any]]:
    """Per strategy with held-out moves: ``n`` moves, the real mean change of the addressed
    member and its standard error, the simulated mean (over the same moves' draws) and
    ``z = (sim_mean − real_mean) / real_se`` (``None`` when fewer than two moves)."""
    out = []
    for s, name in enumerate(names):
        r = np.asarray(real[s])
        if not r.size:
            continue
        se = float(np.std(r, ddof=1) / math.sqrt(r.size)) if r.size > 1 else None
        sim_mean = float(np.mean(sim_means[s]))
        z = (sim_mean - float(r.mean())) / se if se else None
        out.append({"strategy": name, "n": int(r.size), "real_mean": float(r.mean()), "real_se": se, "sim_mean": sim_mean, "z": z})
    return out


class _Trajectories:
    """The whole-session check: every step t of a held-out dialogue (cut as
    :mod:`rescue_env.dynamics.replay` says) starts a window; the real therapist's next moves
    (up to ``max(HORIZONS)``) are replayed open loop from the real state at t, ``draws`` times,
    and the simulated draws are set against what really followed."""

    def __init__(self, scenario: str, draws: int, heterogeneity: float):
        self.scenario, self.draws, self.heterogeneity = scenario, draws, heterogeneity
        self.n_states = len(pattern_states(scenario))
        self.worst: dict[int, list[tuple[float, float, np.ndarray]]] = {h: [] for h in HORIZONS}  # (real start, real end, sim ends)
        self.changes = np.zeros(2)  # real, simulated (draw-averaged) pattern changes
        self.steps = 0
        self.occupancy = np.zeros((2, self.n_states))
        self.drift = np.zeros(2)  # summed mean |Δg| per step, real and simulated
        self.windows = 0

    def add(self, params: Any, dialogue: Dialogue, seed: int) -> None:
        steps = extract_steps(dialogue)
        n = len(dialogue.participants)
        windows = []
        for t in range(len(steps) - 1):
            h = min(max(HORIZONS), len(steps) - 1 - t)
            actions = [move_action(self.scenario, n, steps[t + k]) for k in range(h)]
            windows.append((steps[t].state, actions, np.array([steps[t + k].annotated for k in range(h)])))
        off = ~np.eye(n, dtype=bool)
        for t, rep in enumerate(replay(params, windows, self.draws, seed, self.heterogeneity)):
            h_avail = len(windows[t][1])
            start = float(np.max(steps[t].state.distress))
            for h in HORIZONS:
                if h <= h_avail:
                    self.worst[h].append((start, float(np.max(steps[t + h].state.distress)), rep.readings[:, h].max(axis=1)))
            real_p = np.array([params.pattern_index(steps[t + k].state.pattern) for k in range(h_avail + 1)])
            self.changes += [np.sum(real_p[1:] != real_p[:-1]), np.mean(np.sum(rep.pattern[:, 1:] != rep.pattern[:, :-1], axis=1))]
            self.steps += h_avail
            self.occupancy[0] += np.bincount(real_p[1:], minlength=self.n_states)
            self.occupancy[1] += np.bincount(rep.pattern[:, 1:].ravel(), minlength=self.n_states) / self.draws
            if n > 1:
                real_g = np.array([steps[t + k].state.stance for k in range(h_avail + 1)])
                self.drift[0] += float(np.sum(np.abs(np.diff(real_g, axis=0))[:, off]) / off.sum())
                self.drift[1] += float(np.sum(np.abs(np.diff(rep.stance, axis=1))[:, :, off]) / off.sum() / self.draws)
            self.windows += 1

    def changes_by_horizon(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per horizon: the real h-step changes of the worst-off reading, the simulated ones."""
        return {
            h: (np.array([end - start for start, end, _ in rows]), np.concatenate([sim - start for start, _, sim in rows]))
            for h, rows in self.worst.items()
            if rows
        }

    def result(self) -> dict[str, Any]:
        if not self.windows:
            return {}
        cov, vario, var_real, var_sim = {}, {}, {}, {}
        for h in HORIZONS:
            rows = self.worst[h]
            if not rows:
                continue
            cov[str(h)] = float(np.mean([np.quantile(sim, 0.05) <= end <= np.quantile(sim, 0.95) for _, end, sim in rows]))
            real_var = float(np.var([end - start for start, end, _ in rows]))
            sim_var = float(np.var(np.concatenate([sim - start for start, _, sim in rows])))
            vario[str(h)] = sim_var / real_var if real_var > 0 else None
            var_real[str(h)], var_sim[str(h)] = real_var, sim_var
        occ = self.occupancy / np.maximum(self.occupancy.sum(axis=1, keepdims=True), 1e-12)
        return {
            "horizons": list(HORIZONS),
            "coverage_90_worst": cov,
            "variogram_ratio": vario,
            "variogram": {"real": var_real, "sim": var_sim},
            "pattern_change_rate": {"real": float(self.changes[0] / self.steps), "sim": float(self.changes[1] / self.steps)},
            "pattern_tvd": float(0.5 * np.abs(occ[0] - occ[1]).sum()),
            "stance_drift": {"real": float(self.drift[0] / self.steps), "sim": float(self.drift[1] / self.steps)},
            "windows": self.windows,
        }


class _Scorer:
    """Accumulates held-out figures over (train, test) splits of one scenario."""

    def __init__(self, scenario: str, rng: np.random.Generator, sim_draws: int, strength: PriorStrength, heterogeneity: float):
        self.scenario = scenario
        self.rng = rng
        self.sim_draws = sim_draws
        self.strength = strength
        self.heterogeneity = heterogeneity
        self.states = pattern_states(scenario)
        self.strats = strategies(scenario)
        self.ll_model: list[float] = []
        self.ll_base: list[float] = []
        self.real: dict[int, list[float]] = {s: [] for s in range(len(self.strats))}
        self.sim: dict[int, list[float]] = {s: [] for s in range(len(self.strats))}
        self.pairs: list[tuple[float, np.ndarray]] = []
        #: per transition: (src, dst, the model's next-pattern distribution)
        self.trans: list[tuple[int, int, np.ndarray]] = []
        self.not_simulated: list[str] = []
        self.trajectories = _Trajectories(scenario, sim_draws, heterogeneity)

    def add(self, train: list[Dialogue], test: list[Dialogue]) -> None:
        scenario = self.scenario
        params, _ = fit_scenario(train, scenario, self.strength)
        marginal = np.ones(len(self.states))
        for d in train:
            for t in extract_transitions(d):
                marginal[t.dst] += 1
        marginal /= marginal.sum()
        model = CalibratedModel(scenario, params, heterogeneity=self.heterogeneity)  # for its action encoding's size
        for d in test:
            for t in extract_transitions(d):
                self.ll_model.append(math.log(params.transition[t.action, t.src, t.dst]))
                self.ll_base.append(math.log(marginal[t.dst]))
                self.trans.append((t.src, t.dst, params.transition[t.action, t.src]))
            cap = model.encoding(len(d.participants)).max_members
            if len(d.participants) > cap:
                # the model cannot simulate this group whole; a cut group would be another session
                self.not_simulated.append(f"{d.sample_id} ({len(d.participants)} members; the {scenario} model simulates {cap})")
                continue
            moves = extract_moves(d)
            for move, sims in zip(moves, simulate_moves(params, moves, self.sim_draws, int(self.rng.integers(2**31)), self.heterogeneity)):
                self.real[move.strategy].append(move.change)
                self.sim[move.strategy].extend(sims.tolist())
                self.pairs.append((move.change, sims))
            self.trajectories.add(params, d, int(self.rng.integers(2**31)))

    def result(self, dialogues: int, folds: int) -> ScenarioFidelity:
        result = ScenarioFidelity(self.scenario, dialogues, folds, not_simulated=self.not_simulated)
        result.transitions = len(self.ll_model)
        if self.ll_model:
            result.loglik_model = float(np.mean(self.ll_model))
            result.loglik_baseline = float(np.mean(self.ll_base))
        for s, name in enumerate(self.strats):
            r, m = self.real[s], self.sim[s]
            result.distress_change[name] = {
                "n": len(r),
                "real_mean": float(np.mean(r)) if r else None,
                "real_sd": float(np.std(r)) if r else None,
                "sim_mean": float(np.mean(m)) if m else None,
                "sim_sd": float(np.std(m)) if m else None,
                "real": [round(x, 4) for x in r],
                "sim": [round(x, 4) for x in m],
            }
        result.moves = len(self.pairs)
        if self.pairs:
            real = np.array([r for r, _ in self.pairs])
            for level in CALIBRATION_LEVELS:
                lo, hi = (1 - level) / 2, (1 + level) / 2
                inside = [np.quantile(m, lo) <= r <= np.quantile(m, hi) for r, m in self.pairs]
                result.calibration[f"{level:g}"] = float(np.mean(inside))
            result.coverage_90 = result.calibration["0.9"]
            result.coverage_50 = result.calibration["0.5"]
            pooled = np.concatenate([m for _, m in self.pairs])
            result.sd_ratio = float(np.std(pooled) / np.std(real)) if np.std(real) > 0 else float("nan")
        self._patterns(result)
        result.effects = strategy_effects(self.real, self.sim, self.strats)
        result.trajectory = self.trajectories.result()
        result.trajectory_changes = self.trajectories.changes_by_horizon()
        return result

    def _patterns(self, result: ScenarioFidelity) -> None:
        """Dwell time and the paper's transition shares, real (held-out labels) vs the model
        (its next-pattern distribution for the same move from the same pattern)."""
        if not self.trans:
            return
        stay_real = np.mean([src == dst for src, dst, _ in self.trans])
        stay_sim = np.mean([dist[src] for src, _, dist in self.trans])
        result.dwell_time = {
            "real": float(1.0 / max(1.0 - stay_real, 1e-9)),
            "simulated": float(1.0 / max(1.0 - stay_sim, 1e-9)),
            "unit": "labelled transitions",
        }
        for a, b, paper in PAPER_FACTS:
            if a not in self.states or b not in self.states:
                continue
            ia, ib = self.states.index(a), self.states.index(b)
            out = [(dst, dist) for src, dst, dist in self.trans if src == ia]
            changes = [dst for dst, _ in out if dst != ia]
            sim_change = sum(1.0 - dist[ia] for _, dist in out)
            result.transition_facts[f"{a}->{b}"] = {
                "paper": paper,
                "real": float(np.mean([dst == ib for dst in changes])) if changes else None,
                "real_changes": len(changes),
                "simulated": float(sum(dist[ib] for _, dist in out) / sim_change) if sim_change > 0 else None,
            }


def evaluate_fidelity(
    dialogues: list[Dialogue],
    scenario: str,
    *,
    folds: int = 5,
    seed: int = 0,
    sim_draws: int = 20,
    strength: PriorStrength = PriorStrength(),
    heterogeneity: float = 1.0,
) -> ScenarioFidelity:
    """k-fold held-out fidelity of the calibrated model for one scenario, folds by group (a
    couple's or family's sessions leave together; k is at most the number of groups, and 0,
    nothing scored, with fewer than two groups); ``heterogeneity``: the spread of simulated
    clients, as ``dynamics.heterogeneity``."""
    ds = [d for d in dialogues if d.scenario == scenario]
    n_groups = len(set(session_groups(ds).values()))
    k = min(folds, n_groups) if n_groups >= 2 else 0
    if k == 0:
        return ScenarioFidelity(scenario, len(ds), k)
    rng = np.random.default_rng(seed)
    scorer = _Scorer(scenario, rng, sim_draws, strength, heterogeneity)
    for held in _group_folds(ds, k, rng):
        held_set = set(int(i) for i in held)
        scorer.add([d for i, d in enumerate(ds) if i not in held_set], [d for i, d in enumerate(ds) if i in held_set])
    return scorer.result(len(ds), k)


def evaluate_holdout(
    train: list[Dialogue],
    heldout: list[Dialogue],
    scenario: str,
    *,
    seed: int = 0,
    sim_draws: int = 20,
    strength: PriorStrength = PriorStrength(),
    heterogeneity: float = 1.0,
) -> ScenarioFidelity:
    """Fit on ``train``'s dialogues of ``scenario`` and score ``heldout``'s (``folds`` = 0)."""
    tr = [d for d in train if d.scenario == scenario]
    te = [d for d in heldout if d.scenario == scenario]
    if not tr or not te:
        return ScenarioFidelity(scenario, len(te), 0)
    scorer = _Scorer(scenario, np.random.default_rng(seed), sim_draws, strength, heterogeneity)
    scorer.add(tr, te)
    return scorer.result(len(te), 0)


def format_fidelity(results: list[ScenarioFidelity]) -> str:
    """Printable tables: log-likelihood per transition, then distress change per strategy."""
    from tabulate import tabulate

    head = [
        [r.scenario, r.dialogues, r.folds or "held-out", r.transitions, f"{r.loglik_model:.3f}", f"{r.loglik_baseline:.3f}", f"{r.gain:+.3f}"]
        for r in results
    ]
    spread = [
        [r.scenario, r.moves, f"{r.coverage_90:.2f}", f"{r.coverage_50:.2f}", f"{r.sd_ratio:.2f}",
         f"{r.dwell_time.get('real', float('nan')):.2f} / {r.dwell_time.get('simulated', float('nan')):.2f}"]
        for r in results
    ]  # fmt: skip
    facts = [
        [r.scenario, name, v["paper"], "-" if v["real"] is None else f"{v['real']:.2f} (of {v['real_changes']})", "-" if v["simulated"] is None else f"{v['simulated']:.2f}"]
        for r in results
        for name, v in r.transition_facts.items()
    ]
    out = [
        "Held-out pattern log-likelihood per transition",
        tabulate(head, headers=["scenario", "dialogues", "folds", "transitions", "model", "marginal baseline", "gain (nats)"]),
        "",
        "Spread of the addressed member's distress change: real inside the simulated bands (targets: 0.80-0.97, 0.40-0.60; sd ratio 0.8-1.25)",
        tabulate(spread, headers=["scenario", "moves", "coverage_90", "coverage_50", "sd_ratio", "dwell real / sim"]),
        "",
        "Pattern changes: the paper's shares, real vs simulated",
        tabulate(facts, headers=["scenario", "change", "paper", "real", "simulated"]),
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
    out += ["", *_format_depths(results)]
    for r in results:
        if r.not_simulated:
            out.append(f"{r.scenario}: distress change not simulated for {', '.join(r.not_simulated)}")
    return "\n".join(out)


def _format_depths(results: list[ScenarioFidelity]) -> list[str]:
    """The strategy-effects and whole-session tables of :func:`format_fidelity`."""
    from tabulate import tabulate

    eff = [
        [r.scenario, e["strategy"], e["n"], f"{e['real_mean']:+.3f} ± {e['real_se'] or 0:.3f}", f"{e['sim_mean']:+.3f}",
         "-" if e["z"] is None else f"{e['z']:+.2f}"]
        for r in results for e in r.effects
    ]  # fmt: skip
    traj = []
    for r in results:
        t = r.trajectory
        if not t:
            continue
        ratio = lambda d: d["sim"] / d["real"] if d["real"] else float("nan")  # noqa: E731
        for h in t["horizons"]:
            key = str(h)
            traj.append([r.scenario, h, f"{t['coverage_90_worst'].get(key, float('nan')):.2f}", f"{t['variogram_ratio'].get(key) or float('nan'):.2f}"]
                        + ([f"{t['pattern_change_rate']['real']:.2f} / {t['pattern_change_rate']['sim']:.2f} ({ratio(t['pattern_change_rate']):.2f})",
                            f"{t['pattern_tvd']:.2f}", f"{t['stance_drift']['real']:.3f} / {t['stance_drift']['sim']:.3f} ({ratio(t['stance_drift']):.2f})",
                            t["windows"]] if h == t["horizons"][0] else ["", "", "", ""]))  # fmt: skip
    return [
        "Strategy effects: mean change of the addressed member, held-out real ± standard error vs simulated; z in real standard errors (target |z| <= 2 where n >= 10)",
        tabulate(eff, headers=["scenario", "strategy", "n", "real mean ± se", "simulated", "z"]),
        "",
        "Whole sessions: real moves replayed open loop (targets at h = 3, 6: coverage 0.80-0.97, variogram ratio 0.75-1.33; rate ratio 0.75-1.33, tvd <= 0.25, drift ratio 0.67-1.5)",
        tabulate(traj, headers=["scenario", "h", "coverage_90_worst", "variogram_ratio", "pattern change real / sim", "pattern_tvd", "stance drift real / sim", "windows"]),
    ]


def plot_fidelity(results: list[ScenarioFidelity], path: str | Path) -> Path:
    """Per scenario: box plots of real vs simulated distress change per strategy, and the
    calibration curve (nominal central band of the simulated draws vs the share of real
    changes inside it; on the diagonal = calibrated, below = overconfident)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2 + len(HORIZONS), figsize=(15 + 3.5 * len(HORIZONS), 3.8 * len(results)), squeeze=False,
                             gridspec_kw={"width_ratios": [3, 1, *([1] * len(HORIZONS))]})  # fmt: skip
    for row, r in zip(axes, results):
        for ax, h in zip(row[2:], HORIZONS):
            _plot_horizon(ax, r, h)
    for cal, r in zip(axes[:, 1], results):
        levels = [float(x) for x in r.calibration]
        cal.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--", label="perfect")
        if levels:
            cal.plot(levels, list(r.calibration.values()), marker="o", color="#dd8452", label="simulated bands")
        cal.set_xlim(0, 1)
        cal.set_ylim(0, 1)
        cal.set_xlabel("nominal band (central share of draws)")
        cal.set_ylabel("real changes inside")
        cal.set_title(f"{r.scenario}: calibration ({r.moves} moves)", fontsize=10)
        cal.legend(fontsize=8, loc="upper left")
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


def _plot_horizon(ax: Any, r: ScenarioFidelity, h: int) -> None:
    """One horizon's panel: the h-step change of the worst-off reading, real vs simulated."""
    if h not in r.trajectory_changes:
        ax.set_axis_off()
        return
    real, sim = r.trajectory_changes[h]
    bins = np.linspace(-1, 1, 41)
    ax.hist(sim, bins=bins, density=True, alpha=0.6, color="#dd8452", label="simulated")
    ax.hist(real, bins=bins, density=True, histtype="step", lw=1.5, color="#4c72b0", label="real")
    cov = r.trajectory.get("coverage_90_worst", {}).get(str(h))
    vario = r.trajectory.get("variogram_ratio", {}).get(str(h))
    ax.set_title(f"{r.scenario}: h={h} worst-off change\ncov90 {cov:.2f}, variogram ratio {vario:.2f}" if cov is not None and vario else f"h={h}", fontsize=9)
    ax.set_xlabel("Δ worst-off reading")
    ax.legend(fontsize=7)
