"""Fitting the calibrated client model from annotated dialogues.

Each estimate is a data average shrunk toward the clinical prior of
:mod:`rescue_env.dynamics.priors` with a fixed number of pseudo-observations, so that a
thin data set moves the numbers only as far as its counts justify. What is counted
(one simulator step is taken to be one labelled transition / one therapist move):

- **pattern transitions**: consecutive labelled rows (``Row.relation_label``, ``""`` = no
  clear pattern), with the therapist's latest strategy since the previous label as the
  action (0 when the therapist did not intervene in between). Each row of the table is a
  stay probability (how long a pattern lasts: its dwell) and a distribution over where the
  pattern goes when it changes, each shrunk hierarchically (the move's row toward the
  pattern's pooled rate, that toward the clinical prior) with strengths chosen by
  leave-one-group-out cross-validation (:func:`fit_transition`);
- **strategy effects**: for each therapist row, the change of each addressed member's
  distress from their last annotation before the row to their first within
  :data:`EFFECT_WINDOW` rows after it, pooled per strategy; per (pattern, strategy) cell
  a spread by empirical Bayes (:func:`fit_effect_cells`);
- **client population**: residuals of those changes grouped by client, a person seen in
  several sessions of one couple being one client (:func:`client_id`);
- **baseline distress**: every annotated distress reading grouped by client, the
  between-client sd by a random-intercept model (:func:`fit_baseline`);
- **dyad warmth**: changes of each ordered pair's annotated stance between its
  annotations, the between-dyad sd of their per-step drift (:func:`fit_warmth`);
- **untended drift**: the same change for members the therapist did not address, relative
  to their distress before;
- **utterance types** per pattern, **who answers** the therapist, and how often a second
  client speaks before the therapist does;
- **drift and reading noise**: the variogram of each member's annotated readings over steps
  (:func:`fit_reading_variogram`): what grows with the distance is latent drift;
- **simulated moments**: the strategies' mean effects and the stance dynamics' scale matched
  to the data by replaying the real moves in the model (:func:`calibrate_by_simulation`).

Groups (a couple, a family) are linked across sessions by
:func:`~rescue_env.data.groups.session_groups`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable

import numpy as np

from rescue_env.data.groups import group_id, session_groups
from rescue_env.data.schema import Dialogue
from rescue_env.dynamics import priors
from rescue_env.dynamics.params import DynamicsParams, ScenarioParams
from rescue_env.dynamics.replay import EFFECT_WINDOW
from rescue_env.state import StateTracker
from rescue_env.taxonomy.labels import UTTERANCE_TYPES, patterns, strategies

#: Lowest untended-growth rate a fit may return (see :func:`fit_scenario`).
UNTENDED_FLOOR = 0.01


@dataclass(frozen=True)
class PriorStrength:
    """Pseudo-observations given to the prior of each estimate (the transition table's are
    chosen by cross-validation: :func:`choose_transition_strength`)."""

    effect: float = 6.0
    untended: float = 10.0
    utterance: float = 20.0
    speak: float = 10.0


@dataclass
class TransitionRecord:
    """One observed pattern transition (indices into the scenario's pattern states)."""

    dialogue: str
    action: int
    src: int
    dst: int


@dataclass
class EffectRecord:
    """One observed distress change of a member after a therapist row (or untended)."""

    dialogue: str
    strategy: int | None  # None = member not addressed
    pattern: int
    before: float
    after: float
    group_size: int
    n_addressed: int
    member: int = -1  # the member's slot: (dialogue, member) is one client
    #: who the client is across dialogues (:func:`client_id`); ``""``: (dialogue, member)
    client: str = ""


def client_id(dialogue: Dialogue, member: int, group: str | None = None) -> str:
    """One client across the sessions of their group (``group``: from :func:`session_groups`;
    ``None``: :func:`group_id`)."""
    return f"{group or group_id(dialogue)}:{dialogue.participants[member].casefold()}"


def extract_transitions(dialogue: Dialogue) -> list[TransitionRecord]:
    """Pattern transitions of one dialogue with the therapist action between them."""
    states = priors.pattern_states(dialogue.scenario)
    strats = strategies(dialogue.scenario)
    labels = set(patterns(dialogue.scenario))
    out: list[TransitionRecord] = []
    prev: int | None = None
    action = 0
    for row in dialogue.rows:
        if row.is_therapist and row.strategy in strats:
            action = 1 + strats.index(row.strategy)
        label = row.relation_label
        if label is None or (label and label not in labels):
            continue
        cur = states.index(label) if label else len(states) - 1
        if prev is not None:
            out.append(TransitionRecord(dialogue.sample_id, action, prev, cur))
        prev, action = cur, 0
    return out


def extract_effects(dialogue: Dialogue, group: str | None = None) -> list[EffectRecord]:
    """Distress changes after therapist rows, for addressed and unaddressed members
    (``group``: the dialogue's group, for the client ids)."""
    strats = strategies(dialogue.scenario)
    states = priors.pattern_states(dialogue.scenario)
    tracker = StateTracker(dialogue.scenario, dialogue.participants)
    # annotations[i] = list of (row position, distress) for member i
    annotations: dict[int, list[tuple[int, float]]] = defaultdict(list)
    snapshots = []
    for pos, row in enumerate(dialogue.rows):
        before = tracker.state.copy()
        snapshots.append(before)
        st = tracker.update(row)
        for e in row.internal_emotion:
            i = tracker.index.get(e.person)
            if i is not None:
                annotations[i].append((pos, float(st.distress[i])))
    out: list[EffectRecord] = []
    n = len(dialogue.participants)
    for pos, row in enumerate(dialogue.rows):
        if not row.is_therapist:
            continue
        before = snapshots[pos]
        targets = list(row.target)
        for s in row.support_strategy:
            targets.extend(s.target)
        addressed = tracker.addressed_slots(targets)
        strategy = strats.index(row.strategy) if row.strategy in strats else None
        if strategy is None:
            continue
        p = states.index(before.pattern) if before.pattern in states else len(states) - 1
        for i in range(n):
            if np.isnan(before.intensity[i]):
                continue
            after = next((d for q, d in annotations[i] if pos < q <= pos + EFFECT_WINDOW), None)
            if after is None:
                continue
            out.append(
                EffectRecord(
                    dialogue.sample_id, strategy if i in addressed else None, p, float(before.distress[i]), after, n, len(addressed), i,
                    client_id(dialogue, i, group),
                )
            )  # fmt: skip
    return out


@dataclass(frozen=True)
class PopulationPrior:
    """Clinical priors of the client population (medians of log-normal priors, and the
    log-sd of each prior): the fit shrinks toward them as far as the data are thin."""

    client_sd: float = 0.08  # sd of a client's lasting offset in how they respond
    moment_sd: float = 0.15  # sd of one move's response around the client's own
    volatility_sd: float = 0.3  # log-sd of how much clients differ in moment noise
    susceptibility_sd: float = 0.3  # log-sd of contagion susceptibility (not identified by the data)
    log_sd: float = 0.7  # prior log-sd of each of the three fitted spreads
    baseline_sd: float = 0.1  # sd of clients' baseline distress level
    level_sd: float = 0.2  # sd of a client's readings around their own level
    warmth_sd: float = 0.02  # sd of a dyad's lasting stance drift per step
    stance_step_sd: float = 0.2  # sd of one step's stance change around the dyad's drift
    offset_log_sd: float = 1.0  # prior log-sd of the baseline / warmth spreads and their noise


def _client_loglik(groups: list[np.ndarray], tau: float, sigma: float, s: float, nodes: np.ndarray, weights: np.ndarray) -> float:
    """Marginal log-likelihood of residuals grouped by client under
    ``x_ck = tau·u_c + sigma·v_c·e_ck`` (u, e standard normal, log v_c ~ N(0, s²)): the
    client offset integrates in closed form, the volatility by Gauss–Hermite quadrature."""
    total = 0.0
    v2 = np.exp(2.0 * s * math.sqrt(2.0) * nodes)  # v_c² at the quadrature nodes
    w = weights / math.sqrt(math.pi)
    for x in groups:
        m = len(x)
        ss, sm = float(x @ x), float(x.sum())
        a = sigma**2 * v2
        b = a + m * tau**2
        logdet = (m - 1) * np.log(a) + np.log(b)
        quad = ss / a - tau**2 * sm**2 / (a * b)
        ll = -0.5 * (m * math.log(2 * math.pi) + logdet + quad)
        top = ll.max()
        total += top + math.log(float(w @ np.exp(ll - top)))
    return total


def fit_population(records: list[EffectRecord], effect: np.ndarray, dyad_share: float, group_share: float, prior: PopulationPrior = PopulationPrior()) -> dict:
    """Empirical-Bayes fit of the client population from the addressed members' distress
    changes: residuals around the fitted mean effects, grouped by client, fitted by maximum
    a posteriori (``scipy.optimize.minimize``) with log-normal priors on the client-offset sd,
    the moment sd and the volatility log-sd. Maps them onto the simulator's traits:
    ``reactivity_sd`` = client-offset sd / rms mean effect, ``reading_noise`` = moment sd,
    ``volatility_sd`` as fitted; ``susceptibility_sd`` stays at its prior."""
    from numpy.polynomial.hermite import hermgauss
    from scipy.optimize import minimize

    by_client: dict[str, list[float]] = defaultdict(list)
    preds = []
    for r in records:
        if r.strategy is None:
            continue
        pred = effect[r.pattern, r.strategy] * _share(r, dyad_share, group_share)
        preds.append(pred)
        by_client[r.client or f"{r.dialogue}:{r.member}"].append((r.after - r.before) - pred)
    groups = [np.asarray(v) for v in by_client.values()]
    mu = np.log([prior.client_sd, prior.moment_sd, prior.volatility_sd])
    nodes, weights = hermgauss(20)

    def neg_post(theta: np.ndarray) -> float:
        tau, sigma, s = np.exp(theta)
        lp = -0.5 * float(np.sum(((theta - mu) / prior.log_sd) ** 2))
        return -(_client_loglik(groups, tau, sigma, s, nodes, weights) + lp) if groups else -lp

    res = minimize(neg_post, mu, method="L-BFGS-B", bounds=[(math.log(1e-3), math.log(1.0))] * 3)
    tau, sigma, s = (float(x) for x in np.exp(res.x))
    # the typical size of a mean effect (the prior table's when there are no moves)
    rms = float(np.sqrt(np.mean(np.square(preds if preds else effect))))
    return {
        "reactivity_sd": float(min(tau / max(rms, 0.02), 5.0)),
        "volatility_sd": s,
        "susceptibility_sd": prior.susceptibility_sd,
        "reading_noise": sigma,
        "fit": {
            "clients": len(groups),
            "moves": int(sum(len(g) for g in groups)),
            "client_offset_sd": tau,
            "moment_sd": sigma,
            "volatility_log_sd": s,
            "rms_mean_effect": rms,
            "converged": bool(res.success),
            "method": "MAP, log-normal priors (PopulationPrior), scipy.optimize.minimize L-BFGS-B; volatility by 20-node Gauss-Hermite",
        },
    }


@dataclass
class StanceRecord:
    """One observed change of a dyad's stance (i toward j) between two annotations of it."""

    dyad: str  # who toward whom, across the sessions of a group (:func:`client_id`)
    pattern: int  # the pattern state at the first annotation
    before: float
    after: float
    steps: int  # therapist moves between the two annotations (at least 1)


def extract_stance_changes(dialogue: Dialogue, group: str | None = None) -> list[StanceRecord]:
    """Changes of each ordered pair's annotated stance between consecutive annotations of
    that pair, with the number of simulator steps (therapist moves, at least 1) between."""
    states = priors.pattern_states(dialogue.scenario)
    tracker = StateTracker(dialogue.scenario, dialogue.participants)
    last: dict[tuple[int, int], tuple[float, int, int]] = {}  # (i, j) -> (stance, moves, pattern)
    moves = 0
    out: list[StanceRecord] = []
    for row in dialogue.rows:
        p = states.index(tracker.state.pattern) if tracker.state.pattern in states else len(states) - 1
        if row.is_therapist:
            moves += 1
        st = tracker.update(row)
        for v in row.viewpoints_attitudes:
            i, j = tracker.index.get(v.source), tracker.index.get(v.target)
            if i is None or j is None or i == j:
                continue
            g = float(st.stance[i, j])
            if (i, j) in last:
                g0, m0, p0 = last[(i, j)]
                dyad = f"{client_id(dialogue, i, group)}->{dialogue.participants[j].casefold()}"
                out.append(StanceRecord(dyad, p0, g0, g, max(1, moves - m0)))
            last[(i, j)] = (g, moves, p)
    return out


def fit_random_offsets(x: np.ndarray, k: np.ndarray, covariate: np.ndarray, group: list[str], prior_tau: float, prior_sigma: float, log_sd: float) -> dict:
    """Between-group sd of lasting per-step drifts, by maximum a posteriori.

    Observation ``m`` of group ``c`` spans ``k_m`` steps: ``x_m ~ N(k_m (μ + β c_m + u_c),
    σ² k_m)`` (a random walk with drift), ``u_c ~ N(0, τ²)`` the group's lasting drift; ``μ``
    and ``β`` (a slope on the covariate: regression toward the middle) are nuisance terms with
    flat priors, ``τ`` and ``σ`` have log-normal priors (medians ``prior_tau``, ``prior_sigma``,
    log-sd ``log_sd``). ``u_c`` integrates out in closed form; ``scipy.optimize.minimize``
    (L-BFGS-B). Returns ``tau`` (the sd of the lasting drift), ``sigma``, ``mu``, ``beta``."""
    from scipy.optimize import minimize

    x, k, cv = (np.asarray(a, dtype=float) for a in (x, k, covariate))
    if x.size == 0:
        return {"tau": prior_tau, "sigma": prior_sigma, "mu": 0.0, "beta": 0.0, "groups": 0, "observations": 0, "converged": True}
    names, gi = np.unique(np.asarray(group), return_inverse=True)
    n_g = len(names)
    K = np.bincount(gi, k, minlength=n_g)
    cv_c = cv - float(np.mean(cv))
    mu0 = np.log([prior_tau, prior_sigma])

    def neg_post(theta: np.ndarray) -> float:
        mu, beta = theta[0], theta[1]
        tau, sigma = math.exp(theta[2]), math.exp(theta[3])
        r = x - k * (mu + beta * cv_c)
        R = np.bincount(gi, r, minlength=n_g)
        q = float(np.sum(r * r / k)) / sigma**2
        a = 1.0 + tau**2 * K / sigma**2
        ll = -0.5 * (float(np.sum(np.log(2 * math.pi * sigma**2 * k))) + float(np.sum(np.log(a))) + q - float(np.sum(tau**2 * (R / sigma**2) ** 2 / a)))
        lp = -0.5 * float(np.sum(((theta[2:] - mu0) / log_sd) ** 2))
        return -(ll + lp)

    start = np.array([float(np.sum(x) / np.sum(k)), 0.0, *mu0])
    res = minimize(neg_post, start, method="L-BFGS-B", bounds=[(-1.0, 1.0), (-1.0, 1.0), (math.log(1e-4), math.log(1.0)), (math.log(1e-3), math.log(2.0))])
    return {
        "tau": float(math.exp(res.x[2])),
        "sigma": float(math.exp(res.x[3])),
        "mu": float(res.x[0]),
        "beta": float(res.x[1]),
        "groups": n_g,
        "observations": int(x.size),
        "converged": bool(res.success),
    }


def extract_levels(dialogue: Dialogue, group: str | None = None) -> list[tuple[str, float]]:
    """Every annotated distress reading of a dialogue, with who it is (:func:`client_id`)."""
    tracker = StateTracker(dialogue.scenario, dialogue.participants)
    out: list[tuple[str, float]] = []
    for row in dialogue.rows:
        st = tracker.update(row)
        for e in row.internal_emotion:
            i = tracker.index.get(e.person)
            if i is not None:
                out.append((client_id(dialogue, i, group), float(st.distress[i])))
    return out


def fit_baseline(levels: list[tuple[str, float]], prior: PopulationPrior = PopulationPrior()) -> dict:
    """The sd of clients' baseline distress: the between-client sd of their distress level,
    from every annotated reading grouped by client across sessions (a random-intercept model,
    :func:`fit_random_offsets` with one step per reading and no covariate; the within-client
    spread, reading noise and moment-to-moment swings, is its ``sigma``)."""
    x = np.array([v for _, v in levels])
    fit = fit_random_offsets(x, np.ones(len(levels)), np.zeros(len(levels)), [c for c, _ in levels],
                             prior.baseline_sd, prior.level_sd, prior.offset_log_sd)  # fmt: skip
    fit["method"] = "MAP random-intercept model (fit_random_offsets) on annotated distress levels, grouped by client"
    return fit


def fit_warmth(records: list[StanceRecord], params: ScenarioParams, prior: PopulationPrior = PopulationPrior()) -> dict:
    """The sd of dyads' warmth (a lasting drift of i's stance toward j per step) from the
    changes between annotations of each ordered pair: minus the model's pattern pull
    (``harden``, linearised over the steps), grouped by dyad across sessions, by
    :func:`fit_random_offsets` (the stance before is a covariate)."""
    x, k, cv, grp = [], [], [], []
    for r in records:
        h = float(params.harden[r.pattern])
        toward, rate = (-1.0, h) if h >= 0 else (1.0, -h)
        x.append((r.after - r.before) - r.steps * rate * (toward - r.before))
        k.append(r.steps)
        cv.append(r.before)
        grp.append(r.dyad)
    fit = fit_random_offsets(np.array(x), np.array(k, float), np.array(cv), grp, prior.warmth_sd, prior.stance_step_sd, prior.offset_log_sd)
    fit["method"] = "MAP random-intercept random walk (fit_random_offsets) on annotated stance changes, grouped by dyad"
    return fit


#: Candidate pseudo-observations of the transition hierarchy's two levels; the fit picks the
#: pair that best predicts held-out groups (:func:`choose_transition_strength`).
TRANSITION_STRENGTHS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 256.0)


@dataclass(frozen=True)
class TransitionStrength:
    """Pseudo-observations of the transition hierarchy: ``*_pattern`` of the clinical prior
    behind a pattern's pooled rate (all moves out of it), ``*_row`` of that pooled rate behind
    one move's row; ``stay_*`` for the stay probability (dwell), ``change_*`` for where a
    changing pattern goes."""

    stay_pattern: float = 8.0
    stay_row: float = 8.0
    change_pattern: float = 8.0
    change_row: float = 8.0


def transition_table(counts: np.ndarray, prior: np.ndarray, strength: TransitionStrength) -> np.ndarray:
    """``[A, P, P]`` next-pattern probabilities from ``counts[action, src, dst]``.

    Each row is a stay probability and a change distribution. The stay probability of a move
    in a pattern is the prior's, rescaled by how much more (or less) often the pattern held
    than the prior expected over all moves out of it (shrunk: ``stay_pattern``), then shrunk
    toward by the move's own counts (``stay_row``); so a pattern's dwell time is learnt from
    every transition out of it while the moves still differ as the prior says. The change
    distribution works the same way: pooled over moves toward the prior's (listening) row,
    tilted per move as the prior tilts it, then the move's own changes. No data: the prior."""
    n_a, n_p, _ = counts.shape
    diag = np.arange(n_p)
    stays = counts[:, diag, diag]
    n = counts.sum(axis=2)
    prior_stay = prior[:, diag, diag]
    # pattern level: observed stays against the prior's expectation for the same moves
    tot = n.sum(axis=0)
    expected = np.where(tot > 0, (n * prior_stay).sum(axis=0) / np.maximum(tot, 1), prior_stay[0])
    pooled = (stays.sum(axis=0) + strength.stay_pattern * expected) / (tot + strength.stay_pattern)
    stay0 = np.clip(prior_stay * (pooled / expected), 0.005, 0.995)
    stay = (stays + strength.stay_row * stay0) / (n + strength.stay_row)
    # change distributions (diagonal removed)
    off = ~np.eye(n_p, dtype=bool)
    prior_change = prior * off
    prior_change /= prior_change.sum(axis=2, keepdims=True)
    changes = counts * off
    m = changes.sum(axis=2)
    pooled_change = (changes.sum(axis=0) + strength.change_pattern * prior_change[0]) / (m.sum(axis=0) + strength.change_pattern)[:, None]
    change0 = pooled_change[None] * np.divide(prior_change, prior_change[0][None], out=np.zeros_like(prior_change), where=prior_change[0][None] > 0)
    change0 /= change0.sum(axis=2, keepdims=True)
    change = (changes + strength.change_row * change0) / (m + strength.change_row)[..., None]
    out = change * (1.0 - stay)[..., None]
    out[:, diag, diag] = stay
    return out


def choose_transition_strength(group_counts: list[np.ndarray], prior: np.ndarray, grid: tuple[float, ...] = TRANSITION_STRENGTHS) -> tuple[TransitionStrength, dict]:
    """The strengths of :func:`transition_table` that best predict held-out groups: each
    group's transitions (a couple or family, :func:`group_id`) scored under the table fitted on
    the others (leave-one-group-out log-likelihood, summed). The stay and change parts of the
    likelihood separate (a transition is a stay, or a change times where it goes), so each
    pair of strengths is chosen on its own part. Fewer than two groups: the defaults."""
    if len(group_counts) < 2:
        return TransitionStrength(), {"groups": len(group_counts), "method": "defaults (fewer than two groups to cross-validate)"}
    total = np.sum(group_counts, axis=0)
    n_p = total.shape[1]
    diag = np.arange(n_p)
    off = ~np.eye(n_p, dtype=bool)
    best_stay: tuple[float, float, float] = (-math.inf, 0.0, 0.0)
    best_change: tuple[float, float, float] = (-math.inf, 0.0, 0.0)
    for kp in grid:
        for kr in grid:
            st = TransitionStrength(kp, kr, kp, kr)
            ll_stay = ll_change = 0.0
            for held in group_counts:
                table = transition_table(total - held, prior, st)
                stay = table[:, diag, diag]
                moved = held.sum(axis=2) - held[:, diag, diag]
                ll_stay += float(np.sum(held[:, diag, diag] * np.log(stay)) + np.sum(moved * np.log1p(-stay)))
                # where the pattern went, given that it changed
                cond = np.where(off, table, 0.0) / (1.0 - stay)[..., None]
                ll_change += float(np.sum(np.where(off & (held > 0), held * np.log(np.where(off, cond, 1.0)), 0.0)))
            best_stay = max(best_stay, (ll_stay, kp, kr))
            best_change = max(best_change, (ll_change, kp, kr))
    chosen = TransitionStrength(best_stay[1], best_stay[2], best_change[1], best_change[2])
    n_tr = float(total.sum())
    return chosen, {
        "groups": len(group_counts),
        "method": "leave-one-group-out log-likelihood over the grid TRANSITION_STRENGTHS",
        "cv_loglik_per_transition": (best_stay[0] + best_change[0]) / max(n_tr, 1.0),
        **chosen.__dict__,
    }


def _share(r: EffectRecord, dyad_share: float, group_share: float) -> float:
    """The share of a move's effect that reaches one of the members it addresses."""
    return 1.0 if r.n_addressed == 1 else (group_share if r.n_addressed >= r.group_size else dyad_share)


def fit_effect_cells(records: list[EffectRecord], effect: np.ndarray, dyad_share: float, group_share: float) -> tuple[np.ndarray, dict]:
    """The spread of each (pattern, strategy) cell's effect, by empirical Bayes.

    The addressed members' changes, as residuals ``x`` around ``share · effect``, are grouped
    by cell ``c``. A cell's variance has a scaled-inverse-χ² prior (``ν0``, ``σ0²``), so its sum
    of squares ``SS_c`` about the cell mean (``d_c`` degrees of freedom) makes
    ``SS_c / (d_c σ0²)`` an F(``d_c``, ``ν0``) variate; ``ν0`` (the shrinkage strength, in
    pseudo-moves) and ``σ0`` maximise that marginal likelihood (``scipy.optimize.minimize``)
    and a cell's variance is its posterior scale ``(ν0 σ0² + SS_c) / (ν0 + d_c)`` (no data:
    ``σ0²``). Large ``ν0``: the data show no cell differing from the pool.

    The cells' means stay the strategy's (the clinical prior's pattern shape plus the
    strategy's shrunk offset): per-cell mean offsets, shrunk with an sd chosen by
    leave-one-group-out cross-validation, did not carry over to held-out families (k-fold
    coverage fell below the target) and are not fitted. Returns the cells' sd ``[P+1, S]``
    (per person: the core draws it unscaled by the share) and the fit."""
    from scipy.optimize import minimize
    from scipy.stats import f as f_dist

    add = [r for r in records if r.strategy is not None]
    keys = sorted({(r.pattern, r.strategy) for r in add})
    if not keys:
        return np.zeros_like(effect), {"cells": 0, "moves": 0, "method": "no moves: no cell spreads"}
    index = {k: c for c, k in enumerate(keys)}
    cell = np.array([index[(r.pattern, r.strategy)] for r in add])
    w = np.array([_share(r, dyad_share, group_share) for r in add])
    x = np.array([(r.after - r.before) - effect[r.pattern, r.strategy] * wi for r, wi in zip(add, w)])
    n = np.bincount(cell, minlength=len(keys)).astype(float)
    mean = np.bincount(cell, x / w, minlength=len(keys)) / n
    ss = np.bincount(cell, (x - w * mean[cell]) ** 2, minlength=len(keys))
    dof = n - 1
    with_dof = (dof > 0) & (ss > 0)
    info: dict = {"cells": len(keys), "moves": len(add)}
    if np.any(with_dof):

        def neg_marginal(theta: np.ndarray) -> float:
            nu0, s0sq = math.exp(theta[0]), math.exp(2 * theta[1])
            q = ss[with_dof] / (dof[with_dof] * s0sq)
            return -float(np.sum(f_dist.logpdf(q, dof[with_dof], nu0) - np.log(dof[with_dof] * s0sq)))

        start = math.sqrt(float(ss[with_dof].sum() / dof[with_dof].sum()))
        res = minimize(neg_marginal, np.array([math.log(10.0), math.log(start)]), method="L-BFGS-B",
                       bounds=[(math.log(0.5), math.log(1e4)), (math.log(1e-3), math.log(2.0))])  # fmt: skip
        nu0, s0sq = float(math.exp(res.x[0])), float(math.exp(2 * res.x[1]))
        var = (nu0 * s0sq + ss) / (nu0 + dof)
        info.update(prior_dof_nu0=nu0, converged=bool(res.success))
    else:  # no cell has two moves: one pooled spread
        s0sq = float(np.mean(x**2))
        var = np.full(len(keys), s0sq)
        info.update(prior_dof_nu0=None, converged=True)
    sd = np.full_like(effect, math.sqrt(s0sq))
    for c, (p, s) in enumerate(keys):
        sd[p, s] = math.sqrt(var[c])
    info.update(
        pooled_cell_sd_sigma0=math.sqrt(s0sq),
        method="empirical Bayes: scaled-inverse-chi2 cell variances, F marginal likelihood, scipy.optimize.minimize L-BFGS-B",
    )
    return sd, info


def _shrunk_mean(values: list[float], prior: float, strength: float) -> float:
    return (float(np.sum(values)) + strength * prior) / (len(values) + strength)


def _fit_transitions(dialogues: list[Dialogue], groups: dict[str, str], scenario: str) -> tuple[np.ndarray, np.ndarray, dict]:
    """The transition table (strengths by leave-one-group-out), the counts and the CV record."""
    n_s, n_p = len(strategies(scenario)), len(priors.pattern_states(scenario))
    by_group: dict[str, np.ndarray] = {}
    for d in dialogues:
        c = by_group.setdefault(groups[d.sample_id], np.zeros((n_s + 1, n_p, n_p)))
        for t in extract_transitions(d):
            c[t.action, t.src, t.dst] += 1
    counts = np.sum(list(by_group.values()), axis=0) if by_group else np.zeros((n_s + 1, n_p, n_p))
    prior_t = priors.transition_prior(scenario)
    t_strength, t_fit = choose_transition_strength(list(by_group.values()), prior_t)
    return transition_table(counts, prior_t, t_strength), counts, t_fit


def _fit_effect_means(effects: list[EffectRecord], scenario: str, strength: PriorStrength) -> tuple[np.ndarray, np.ndarray, float, list[float]]:
    """Mean effect per (pattern, strategy): the prior's pattern shape shifted per strategy by
    the shrunk data offset; the moves per strategy; the untended growth and its observations."""
    n_s = len(strategies(scenario))
    prior_e = priors.effect_prior(scenario)
    effect = prior_e.copy()
    effect_n = np.zeros(n_s, dtype=int)
    for s in range(n_s):
        deltas = [e.after - e.before for e in effects if e.strategy == s]
        effect_n[s] = len(deltas)
        if deltas:
            prior_mean = float(np.mean([prior_e[e.pattern, s] for e in effects if e.strategy == s]))
            effect[:, s] = prior_e[:, s] + _shrunk_mean([x - prior_mean for x in deltas], 0.0, strength.effect)
    growth_obs = [(e.after - e.before) / max(e.before, 1e-6) for e in effects if e.strategy is None and e.before > 0.4]
    # Floored at UNTENDED_FLOOR: a small data set's regression to the mean (a member who
    # just spiked calms a little whoever speaks) hides the bucket effect the model must keep.
    untended_growth = float(np.clip(_shrunk_mean(growth_obs, 0.03, strength.untended), UNTENDED_FLOOR, 0.1))
    return effect, effect_n, untended_growth, growth_obs


def _fit_turns(dialogues: list[Dialogue], scenario: str, strength: PriorStrength) -> dict:
    """Utterance types per pattern, how often a second client speaks, who answers."""
    states = priors.pattern_states(scenario)
    n_p, n_u = len(states), len(UTTERANCE_TYPES)
    u_counts, second, gaps = np.zeros((n_p, n_u)), np.zeros(n_p), np.zeros(n_p)
    answered = answered_n = 0
    for d in dialogues:
        tracker = StateTracker(d.scenario, d.participants)
        addressed: set[int] | None = None
        run, gap_pattern = 0, n_p - 1
        for row in d.rows:
            p = states.index(tracker.state.pattern) if tracker.state.pattern in states else n_p - 1
            if row.is_therapist:
                if run:
                    gaps[gap_pattern] += 1
                    second[gap_pattern] += run >= 2
                targets = list(row.target)
                for s in row.support_strategy:
                    targets.extend(s.target)
                addressed = tracker.addressed_slots(targets)
                run, gap_pattern = 0, p
            else:
                if row.utterance_type in UTTERANCE_TYPES:
                    u_counts[p, UTTERANCE_TYPES.index(row.utterance_type)] += 1
                if addressed is not None and run == 0 and row.primary_speaker in tracker.index and len(addressed) < len(d.participants):
                    answered_n += 1
                    answered += tracker.index[row.primary_speaker] in addressed
                run += 1
            tracker.update(row)
    prior_u = priors.utterance_prior(scenario)
    prior_second = np.where(priors.pattern_valence(scenario) < -0.8, 0.6, 0.4)
    p_answer = (answered + strength.speak * 0.8) / (answered_n + strength.speak)
    n_avg = 2 if scenario == "couple" else 4  # the answer rate as a logit bonus among ~n members
    return {
        "utterance": (u_counts + strength.utterance * prior_u) / (u_counts.sum(axis=1, keepdims=True) + strength.utterance),
        "second_turn": (second + strength.speak * prior_second) / (gaps + strength.speak),
        "speak_addressed": float(np.log(max(p_answer, 1e-3) * (n_avg - 1) / max(1 - p_answer, 1e-3))),
        "counts": {"utterance_observations": int(u_counts.sum()), "answer_observations": answered_n, "turn_gaps": int(gaps.sum())},
    }


#: Largest step lag of the reading variogram (:func:`fit_reading_variogram`).
VARIOGRAM_LAGS = 8


def fit_reading_variogram(dialogues: list[Dialogue]) -> dict:
    """How annotated distress moves over steps: the mean squared change of a member's reading
    between two annotations ``L`` steps apart (every pair, ``L`` = 1..:data:`VARIOGRAM_LAGS`;
    steps as :mod:`rescue_env.dynamics.replay` cuts them), fitted by weighted least squares as
    ``a + b·L`` (``a, b >= 0``). ``b`` is what accumulates per step (latent drift), ``a`` what
    does not (the reading noise of both readings and one step's swing)."""
    from rescue_env.dynamics.replay import extract_steps

    sums, counts = np.zeros(VARIOGRAM_LAGS + 1), np.zeros(VARIOGRAM_LAGS + 1)
    for d in dialogues:
        steps = extract_steps(d)
        for i in range(len(d.participants)):
            seq = [(k, st.first_reading[i]) for k, st in enumerate(steps) if st.annotated[i]]
            for x, (k1, r1) in enumerate(seq):
                for k2, r2 in seq[x + 1 :]:
                    if k2 - k1 <= VARIOGRAM_LAGS:
                        sums[k2 - k1] += (r2 - r1) ** 2
                        counts[k2 - k1] += 1
    lags = np.nonzero(counts)[0]
    if len(lags) < 2:
        return {"intercept": None, "slope": None, "pairs": int(counts.sum())}
    from scipy.optimize import nnls

    w = np.sqrt(counts[lags])
    (a, b), _ = nnls(np.column_stack([w, w * lags]), w * sums[lags] / counts[lags])
    return {"intercept": float(a), "slope": float(b), "pairs": int(counts.sum()),
            "mean_square_by_lag": {str(L): float(sums[L] / counts[L]) for L in lags}}  # fmt: skip


def fit_scenario(
    dialogues: list[Dialogue], scenario: str, strength: PriorStrength = PriorStrength(), population: PopulationPrior = PopulationPrior(),
    *, calibrate_means: bool = True,
) -> tuple[ScenarioParams, dict]:
    """Fit one scenario's parameters; returns them and the counts behind each estimate.
    ``calibrate_means``: match the simulated means to the data by simulation
    (:func:`calibrate_by_simulation`)."""
    strats = strategies(scenario)
    states = priors.pattern_states(scenario)
    groups = session_groups(dialogues)
    transition, counts, t_fit = _fit_transitions(dialogues, groups, scenario)
    effects = [e for d in dialogues for e in extract_effects(d, groups[d.sample_id])]
    effect, effect_n, untended_growth, growth_obs = _fit_effect_means(effects, scenario, strength)
    turns = _fit_turns(dialogues, scenario, strength)
    params = ScenarioParams(
        scenario=scenario, patterns=list(patterns(scenario)), strategies=list(strats), transition=transition, effect=effect,
        pattern_pressure=-0.02 * priors.pattern_valence(scenario), harden=np.array([priors.HARDEN.get(p or "", 0.0) for p in states]),
        soften=np.array([priors.SOFTEN.get(s, 0.03) for s in strats]), second_turn=turns["second_turn"], utterance=turns["utterance"],
        utterance_effect=np.array([priors.UTTERANCE_EFFECT[u] for u in UTTERANCE_TYPES]), untended_growth=untended_growth,
        speak_addressed=turns["speak_addressed"],
    )  # fmt: skip
    spread = _fit_spread(params, dialogues, effects, groups, population)
    sim_fit = calibrate_by_simulation(params, dialogues) if calibrate_means and dialogues else {"method": "not run"}
    provenance = {
        "dialogues": len(dialogues),
        "groups": len(set(groups.values())),
        "transitions": int(counts.sum()),
        "transitions_per_action": {("listen" if a == 0 else strats[a - 1]): int(counts[a].sum()) for a in range(len(strats) + 1)},
        "effect_observations_per_strategy": {strats[s]: int(effect_n[s]) for s in range(len(strats))},
        "untended_observations": len(growth_obs),
        "untended_growth_raw": float(_shrunk_mean(growth_obs, 0.03, strength.untended)),
        **turns["counts"],
        **spread,
        "transition_strength": t_fit,
        "simulated_moments": sim_fit,
    }
    return params, provenance


def _fit_spread(params: ScenarioParams, dialogues: list[Dialogue], effects: list[EffectRecord], groups: dict[str, str], population: PopulationPrior) -> dict:
    """The spreads of ``params`` in place: client population (reactivity, volatility),
    baseline and warmth, the reading noise and the latent drift per step (from the reading
    variogram), and each cell's spread beyond those; returns the fits' records."""
    cell_sd, cell_fit = fit_effect_cells(effects, params.effect, params.dyad_share, params.group_share)
    pop = fit_population(effects, params.effect, params.dyad_share, params.group_share, population)
    params.reactivity_sd, params.volatility_sd = pop["reactivity_sd"], pop["volatility_sd"]
    params.susceptibility_sd, params.reading_noise = pop["susceptibility_sd"], pop["reading_noise"]
    base_fit = fit_baseline([x for d in dialogues for x in extract_levels(d, groups[d.sample_id])], population)
    warm_fit = fit_warmth([r for d in dialogues for r in extract_stance_changes(d, groups[d.sample_id])], params, population)
    params.baseline_sd, params.warmth_sd = base_fit["tau"], warm_fit["tau"]
    vario = fit_reading_variogram(dialogues)
    if vario["slope"] is not None:
        # A move's one-step change (the population fit's moment sd) is the reading noise plus
        # one step's drift; the variogram says how much of it accumulates. The drift is what
        # the latent distress does per step (distress_noise, scaled by volatility whose
        # mean square is exp(2 s²)); the rest stays reading noise.
        vol2 = math.exp(2 * params.volatility_sd**2)
        drift = min(vario["slope"], pop["reading_noise"] ** 2)
        params.distress_noise = math.sqrt(drift / vol2)
        params.reading_noise = math.sqrt(max(pop["reading_noise"] ** 2 - drift, 1e-6))
    base_var = params.reading_noise**2 + params.distress_noise**2 + pop["fit"]["client_offset_sd"] ** 2
    params.effect_sd = np.sqrt(np.maximum(np.square(cell_sd) - base_var, 0.0))
    return {"client_population": pop["fit"], "client_baseline": base_fit, "dyad_warmth": warm_fit, "effect_cells": cell_fit, "reading_variogram": vario}


#: Draws per move and rounds of :func:`calibrate_by_simulation`.
MOMENT_DRAWS = 10
MOMENT_ROUNDS = 2


def calibrate_by_simulation(params: ScenarioParams, dialogues: list[Dialogue], seed: int = 0) -> dict:
    """Match two simulated means to the data by simulation, in place (the method of simulated
    moments; each round moves the parameter by the gap over the measured slope).

    - **Strategy effects.** ``effect[:, s]`` is the data's mean change after strategy ``s``
      (shrunk toward the prior), but a simulated step adds terms to the addressed member's
      change besides the therapist's effect: the pattern's pressure, the sidelined worst-off
      member, the clients' own turns, the ripple, the clipping at 0. Those offset the effect
      (a family's calming moves came out flat). So the real moves (:func:`~rescue_env.dynamics.replay.extract_moves`)
      are replayed one step from their real states and each strategy's column is shifted until
      the simulated mean change equals the fitted mean over the same moves.
    - **Stance drift.** The stance dynamics (the pattern's ``harden``, ``soften``, the
      stance part of ``utterance_effect``, ``stance_noise``) are clinical priors; one scale
      on all of them is set so that the mean |Δg_ij| per step of a replayed step equals the
      real one (steps as :mod:`rescue_env.dynamics.replay` cuts them).
    """
    from rescue_env.dynamics.calibrated import CalibratedModel
    from rescue_env.dynamics.replay import extract_moves, extract_steps, move_action, replay, simulate_moves

    model = CalibratedModel(params.scenario, params)
    ds = [d for d in dialogues if len(d.participants) <= model.encoding(len(d.participants)).max_members]
    moves = [m for d in ds for m in extract_moves(d)]
    record: dict = {"moves": len(moves), "method": "simulated moments: replayed real moves, MOMENT_ROUNDS rounds of MOMENT_DRAWS draws"}
    shift = np.zeros(len(params.strategies))
    for r in range(MOMENT_ROUNDS if moves else 0):
        sims = simulate_moves(params, moves, MOMENT_DRAWS, seed + r).mean(axis=1)
        for s in range(len(params.strategies)):
            idx = [m for m, mv in enumerate(moves) if mv.strategy == s]
            if not idx:
                continue
            target = float(np.mean([params.effect[params.pattern_index(moves[m].state.pattern), s] - shift[s] for m in idx]))
            share = float(np.mean([1.0 if len(moves[m].slots) == 1 else (params.group_share if len(moves[m].slots) >= moves[m].state.n else params.dyad_share) for m in idx]))
            step = float(np.clip((target - float(np.mean(sims[idx]))) / share, -0.3, 0.3))
            params.effect[:, s] += step
            shift[s] += step
    record["effect_shift"] = {name: float(x) for name, x in zip(params.strategies, shift)}
    record.update(_calibrate_stance(params, ds, seed, extract_steps, move_action, replay))
    return record


def _calibrate_stance(params: ScenarioParams, dialogues: list[Dialogue], seed: int, extract_steps, move_action, replay) -> dict:
    """The stance-dynamics scale of :func:`calibrate_by_simulation`, in place."""
    by_size: dict[int, list] = defaultdict(list)
    real = []
    for d in dialogues:
        n = len(d.participants)
        if n < 2:
            continue
        off = ~np.eye(n, dtype=bool)
        steps = extract_steps(d)
        for t in range(len(steps) - 1):
            by_size[n].append((steps[t].state, [move_action(params.scenario, n, steps[t])], np.ones((1, n), bool)))
            real.append(float(np.mean(np.abs(steps[t + 1].state.stance - steps[t].state.stance)[off])))
    if not real:
        return {"stance_scale": 1.0}
    target, scale = float(np.mean(real)), 1.0
    for r in range(MOMENT_ROUNDS):
        drift = []
        for n, windows in by_size.items():
            off = ~np.eye(n, dtype=bool)
            drift += [float(np.mean(np.abs(rep.stance[:, 1] - rep.stance[:, 0])[:, off])) for rep in replay(params, windows, MOMENT_DRAWS, seed + 100 + r)]
        step = float(np.clip(target / max(float(np.mean(drift)), 1e-9), 0.25, 4.0))
        params.harden, params.soften = params.harden * step, params.soften * step
        params.utterance_effect[:, 1] *= step
        params.stance_noise *= step
        scale *= step
    return {"stance_scale": scale, "real_stance_drift": target}


def fit_params(
    dialogues: Iterable[Dialogue],
    *,
    sources: list[str] | None = None,
    strength: PriorStrength = PriorStrength(),
    base: DynamicsParams | None = None,
) -> DynamicsParams:
    """Fit both scenarios from ``dialogues``. A scenario with no dialogue keeps ``base``'s
    parameters (the packaged defaults when ``base`` is None) and says so in provenance."""
    ds = list(dialogues)
    scenarios: dict[str, ScenarioParams] = {}
    prov: dict = {
        "fitted_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "sources": sources or [],
        "method": "data counts shrunk toward clinical priors (rescue_env.dynamics.priors)",
        "prior_pseudo_observations": strength.__dict__,
        "step_unit": "one labelled pattern transition / one therapist move",
        "scenarios": {},
    }
    for scenario in ("couple", "family"):
        subset = [d for d in ds if d.scenario == scenario]
        if subset:
            scenarios[scenario], prov["scenarios"][scenario] = fit_scenario(subset, scenario, strength)
        else:
            fallback = base if base is not None else DynamicsParams.load()
            scenarios[scenario] = fallback[scenario]
            prov["scenarios"][scenario] = {"dialogues": 0, "note": "no data: parameters kept from the base file"}
    return DynamicsParams(scenarios=scenarios, provenance=prov)


def prior_params() -> DynamicsParams:
    """Parameters from the priors alone (no data), for tests and as a reference."""
    scenarios = {scenario: fit_scenario([], scenario)[0] for scenario in ("couple", "family")}
    return DynamicsParams(scenarios=scenarios, provenance={"method": "priors only (no data)"})
