"""The behaviour prior: a model of what real therapists do next, fitted on real dialogues.

Given the state extracted after a row (:mod:`rescue_env.state`), it gives the probability
that the therapist speaks now, a distribution over target options (one member, a dyad, the
group) and over strategies; their product is a distribution over the env's flat actions,
:meth:`BehaviourPrior.action_probs`, on the env's masks. It serves three uses:

- ``agent=imitation``: an agent that acts and ranks with it (:class:`PriorAgent`), so
  ``rescue eval-tasks predictor=agent agent=imitation`` scores it on ITP/STP/SSP;
- ``rescue train experiment=grounded``: the π_prior of the KL penalty and the moves of the
  behaviour-cloning warm start (:mod:`rescue_env.agents.grounded`);
- group k-fold validation against the majority baseline (:func:`cross_validate`).

**Model.** Three scikit-learn ``LogisticRegression`` heads on standardised features:

- *speak* (binary): fitted on the decisions after a client row (those ITP asks about, and
  the only ones the simulator has: its therapist always decides after clients spoke);
- *target* (a conditional logit over the options of the group): a binary logistic model on
  (decision, option) pairs whose odds are normalised over the valid options, so one model
  serves couples of two or three and families of any size;
- *strategy* (multinomial) over the scenario's strategies.

**Regularisation.** Each head's L2 strength is chosen, inside every fit, among
:data:`C_GRID` by the held-out log-likelihood of a group k-fold over the fit's own
dialogues (a couple's or family's sessions leave together; :meth:`_Head.choose_C`). The
intercept is not penalised, so a strong penalty shrinks the speak and strategy heads
toward the training label frequencies; the target head's role columns (the option's kind,
whether it is the client who just spoke) are barely penalised, so it shrinks toward that
role model, the majority baseline's. The chosen strengths are saved with the prior
(``n["C_speak"]``, ``n["C_target"]``, ``n["C_strategy"]``).

Features: the pattern; each member's distress (as group summaries for speak/strategy, per
option for the target: its distress, whether it holds the worst-off member, its untended
turns, its members' stances), stances, untended turns (the fewest: the therapist's rhythm),
and the *turn*: whether the therapist spoke last, who the latest client speaker was (for the
target, whether that client spoke the last row: after its own row a therapist goes on with
whom it addressed), whom the last row addressed, its utterance type, the therapist's last
strategy and target, the row's position in the session. The simulator's observation carries
part of the turn (the therapist's last move, the latest client, whom the last row addressed,
its utterance type, none when the therapist spoke last), so on observations
(:meth:`BehaviourPrior.action_probs_from_obs`) those features are read from it and the rest
take their training mean: the prior there is the real therapists' move given what a policy sees.

**Why scikit-learn and not a torch network of the policy's shape.** Some turn features
that predict real therapists (the position in the session, its style so far) are not in
the policy's observation, so a network of the policy's shape could not use them.
About 1,000 real decisions fit a regularised linear model well; its maximum-likelihood fit
(a proper scoring rule) gives calibrated probabilities without the held-out calibration set
that ``CalibratedClassifierCV`` would take from so little data (checked by a reliability
test). PPO is initialised by behaviour cloning on the real moves instead.

**Files.** :meth:`BehaviourPrior.save` writes JSON: the weights, the standardisation, the
feature layout and a format version; nothing is pickled, so a prior file from anyone loads
without running code. :meth:`BehaviourPrior.load` refuses another format version.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from rescue_env.agents.base import PriorError, PriorFileNotFound, Ranking
from rescue_env.atomic import atomic_write_text
from rescue_env.data.groups import session_groups
from rescue_env.data.schema import GROUP_LABELS, THERAPIST, Dialogue
from rescue_env.state import GroupState, StateTracker
from rescue_env.taxonomy.actions import DEFAULT_MAX_MEMBERS, ActionEncoding
from rescue_env.taxonomy.labels import UTTERANCE_TYPES, patterns, strategies

FORMAT = "rescue-behaviour-prior"
VERSION = 4  # 2: the session-style and fewest-untended features, chosen L2 strengths; 3: just_spoke; 4: group_at_opening
#: the floor every head's probability is mixed with (uniform share), so that
#: ``log π_prior`` is finite for every valid action
EPSILON = 0.01
#: the inverse L2 strengths each head chooses among, by group k-fold inside its training
#: dialogues (:meth:`_Head.choose_C`): from nearly the training label frequencies (speak,
#: strategy) or the turn-only target model, to a loose fit
C_GRID = (0.0001, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
#: how much less the ``free`` columns of a head are shrunk (:meth:`Linear.fit`)
FREE_WEIGHT = 100.0
#: rows after which the position feature saturates
POSITION_SCALE = 80.0
#: group summaries of :func:`group_features` (distress, stances, untended turns, size)
N_SUMMARY = 9
#: per-option feature names (the target head)
OPTION_FEATURES = (
    "individual", "dyad", "group", "distress", "has_worst", "untended", "stance_out",
    "just_spoke", "last_target", "addressed", "with_last_client", "group_after_group", "group_after_therapist",
    "kind_share", "group_at_opening",
)  # fmt: skip
#: the target head's columns that are shrunk little: the option's kind and whether it is the
#: client who just spoke (the roles the majority baseline counts); the others are shrunk
#: toward that role model
TARGET_ROLES = tuple(OPTION_FEATURES.index(f) for f in ("individual", "dyad", "group", "just_spoke"))


# ---------------------------------------------------------------------------------------------
# features


@dataclass
class Batch:
    """States as arrays, padded to ``cap`` members (turn entries ``nan`` when unknown)."""

    D: np.ndarray  # (B, cap) distress
    G: np.ndarray  # (B, cap, cap) stances
    n: np.ndarray  # (B,) members present
    pattern: np.ndarray  # (B,) pattern index, len(patterns) = none
    unt: np.ndarray  # (B, cap) untended turns
    turn: np.ndarray  # (B, K) group turn features
    member_turn: np.ndarray  # (B, cap, 3) last client / last therapist target / addressed
    kind_share: np.ndarray  # (B, 3) the session's share of moves to one member / a dyad / the group
    opening: np.ndarray  # (B,) 1 while no client has spoken yet in the session, else 0


def turn_size(scenario: str) -> int:
    """Columns of a :class:`Batch`'s turn: who spoke, the utterance type, the therapist's last
    strategy, position and addressees (4), the session's strategy shares and its move count."""
    S = len(strategies(scenario))
    return 1 + len(UTTERANCE_TYPES) + 1 + S + 1 + 4 + S + 1


def _kind(addressed: int, n: int) -> int:
    """0 one member, 1 a dyad, 2 the whole group (larger subgroups: the encoding's group)."""
    return 0 if addressed <= 1 else 1 if addressed == 2 < n else 2


def batch_from_states(states: Sequence[GroupState], cap: int) -> Batch:
    """A :class:`Batch` of extracted states (with their turn)."""
    scenario = states[0].scenario
    pats = {p: i for i, p in enumerate(patterns(scenario))}
    strat = {s: i for i, s in enumerate(strategies(scenario))}
    utt = {u: i for i, u in enumerate(UTTERANCE_TYPES)}
    B, S = len(states), len(strategies(scenario))
    D, G, unt = np.zeros((B, cap)), np.zeros((B, cap, cap)), np.zeros((B, cap))
    n, pat = np.zeros(B, int), np.zeros(B, int)
    turn, mt, kinds = np.zeros((B, turn_size(scenario))), np.zeros((B, cap, 3)), np.zeros((B, 3))
    group = GROUP_LABELS[scenario]
    opening = np.array([st.last_client is None for st in states], float)
    for b, st in enumerate(states):
        k = st.n
        n[b] = k
        D[b, :k], G[b, :k, :k], unt[b, :k] = st.distress, st.stance, np.minimum(st.untended, 10)
        pat[b] = pats.get(st.pattern, len(pats)) if st.pattern else len(pats)
        index = {m: i for i, m in enumerate(st.members)}
        t = turn[b]
        if st.last_client is None and not st.last_utterance_type and not st.last_addressee:
            t[:] = np.nan  # no transcript turn (a simulated state, or before row 1): unknown
            mt[b] = kinds[b] = np.nan
            continue
        t[0] = st.last_speaker == THERAPIST
        t[1 + utt.get(st.last_utterance_type, len(utt))] = 1.0
        o = 2 + len(utt)
        t[o + strat.get(st.last_strategy or "", S)] = 1.0
        o += S + 1
        t[o] = min(st.row_index, POSITION_SCALE) / POSITION_SCALE
        t[o + 1] = THERAPIST in st.last_addressee
        t[o + 2] = group in st.last_addressee
        t[o + 3] = st.distress[index[st.last_client]] if st.last_client in index else np.nan
        # the session's own style so far (shares shrunk by one pseudo-move: none yet is 0)
        o += 4
        for strategy, addressed in st.moves:
            if strategy in strat:
                t[o + strat[strategy]] += 1.0 / (len(st.moves) + 1)
            kinds[b, _kind(addressed, k)] += 1.0 / (len(st.moves) + 1)
        t[o + S] = min(len(st.moves), 20) / 20
        if st.last_client in index:
            mt[b, index[st.last_client], 0] = 1.0
        for m in st.last_target:
            if m in index:
                mt[b, index[m], 1] = 1.0
        for m in st.last_addressee:
            if m in index:
                mt[b, index[m], 2] = 1.0
            elif m == group:
                mt[b, :k, 2] = 1.0
    return Batch(D, G, n, pat, unt, turn, mt, kinds, opening)


def batch_from_obs(obs: np.ndarray, observer: Any, scenario: str) -> Batch:
    """A :class:`Batch` of flat env observations (``observer``: the env's ``Observer``; the
    flat layout is gymnasium's ``flatten`` of its ``Dict`` space, keys sorted). Of the turn,
    the observation holds the latest client, whom the last row addressed, its utterance type
    (none: the therapist spoke last) and the therapist's last move; the rest (the position,
    the session's style) is ``nan``, which the heads read as its training mean."""
    obs = np.asarray(obs, dtype=np.float64).reshape(len(obs), -1)
    parts = observer.unflatten_batch(obs)
    cap = observer.cap
    B = len(obs)
    n = np.clip(np.rint(parts["present"].sum(axis=1)).astype(int), 1, cap)
    unt = np.where(parts["untended"] >= 1.0, 10.0, parts["untended"] * 10.0)
    D = parts["distress"]
    turn, mt = np.full((B, turn_size(scenario)), np.nan), np.full((B, cap, 3), np.nan)
    known = parts["speaker"].sum(axis=1) > 0  # a client has spoken (else the turn is unknown)
    U, S = len(UTTERANCE_TYPES), len(strategies(scenario))
    utt = np.concatenate([parts["utterance"], (parts["utterance"].sum(axis=1) == 0)[:, None]], axis=1)
    spoken = parts["spoken_to"]
    o = 2 + U + S + 1  # the position column (see batch_from_states)
    rows = np.flatnonzero(known)
    # the therapist's last move (none yet: the "no strategy" column), known with the turn
    last = parts["last_strategy"][rows]
    turn[rows, 2 + U:2 + U + S + 1] = np.concatenate([last, (last.sum(axis=1) == 0)[:, None]], axis=1)
    mt[rows, :, 1] = parts["last_target"][rows]
    turn[rows, 1:2 + U] = utt[rows]
    # a row without a client utterance type is the therapist's own (the simulator's clients
    # always carry one): whether the therapist spoke last
    turn[rows, 0] = utt[rows, U]
    turn[rows, o + 1] = spoken[rows, cap]
    turn[rows, o + 2] = spoken[rows, cap + 1]
    turn[rows, o + 3] = (D[rows] * parts["speaker"][rows]).sum(axis=1)
    present = np.arange(cap)[None, :] < n[:, None]
    mt[rows, :, 0] = parts["speaker"][rows]
    mt[rows, :, 2] = np.where(spoken[rows, cap + 1:cap + 2] > 0, present[rows], spoken[rows, :cap])
    opening = (~known).astype(float)
    return Batch(D, parts["stance"], n, np.argmax(parts["pattern"], axis=1), unt, turn, mt, np.full((B, 3), np.nan), opening)


def group_features(b: Batch, n_patterns: int) -> np.ndarray:
    """Features of the group as a whole (speak and strategy heads)."""
    B, cap = b.D.shape
    present = np.arange(cap)[None, :] < b.n[:, None]
    d = np.where(present, b.D, np.nan)
    pair = present[:, :, None] & present[:, None, :] & ~np.eye(cap, dtype=bool)[None]
    g = np.where(pair, b.G, np.nan)
    u = np.where(present, b.unt, np.nan) / 10.0
    onehot = np.eye(n_patterns + 1)[b.pattern]
    with np.errstate(all="ignore"):
        stance_mean = np.where(pair.any(axis=(1, 2)), np.nanmean(g.reshape(B, -1), axis=1), 0.0)
        stance_min = np.where(pair.any(axis=(1, 2)), np.nanmin(np.where(pair, b.G, np.inf).reshape(B, -1), axis=1), 0.0)
    summary = np.stack([
        np.nanmax(d, axis=1), np.nanmean(d, axis=1), np.nanmax(d, axis=1) - np.nanmin(d, axis=1),
        stance_mean, stance_min, np.nanmax(u, axis=1), np.nanmean(u, axis=1), b.n / 8.0,
        np.nanmin(u, axis=1),  # turns since the therapist last addressed anyone: its rhythm
    ], axis=1)  # fmt: skip
    assert summary.shape[1] == N_SUMMARY
    return np.concatenate([onehot, summary, b.turn], axis=1)


def strategy_view(Xg: np.ndarray, n_patterns: int) -> np.ndarray:
    """The strategy head's columns of :func:`group_features`: the pattern and the turn (who
    spoke, the utterance type, the therapist's last strategy...), not the distress summaries:
    with ~200 moves per scenario the fuller view fits noise (group k-fold)."""
    return np.concatenate([Xg[:, : n_patterns + 1], Xg[:, n_patterns + 1 + N_SUMMARY:]], axis=1)


def speak_view(Xg: np.ndarray, scenario: str) -> np.ndarray:
    """The speak head's columns of :func:`group_features`: all but the session's style (its
    strategy shares and move count, the last ``len(strategies) + 1`` columns), which say how
    the therapist intervenes, not when."""
    return Xg[:, : Xg.shape[1] - len(strategies(scenario)) - 1]


def option_features(b: Batch, encoding: ActionEncoding) -> tuple[np.ndarray, np.ndarray]:
    """``(X[B, T, F], valid[B, T])``: features of each target option (:data:`OPTION_FEATURES`)."""
    B, cap = b.D.shape
    T = encoding.n_targets
    X = np.zeros((B, T, len(OPTION_FEATURES)))
    valid = np.zeros((B, T), bool)
    present = np.arange(cap)[None, :] < b.n[:, None]
    worst = np.argmax(np.where(present, b.D, -np.inf), axis=1)
    off = ~np.eye(cap, dtype=bool)[None] & present[:, None, :]
    stance_out = np.where(off, b.G, 0.0).sum(axis=2) / np.maximum(b.n[:, None] - 1, 1)
    for k in np.unique(b.n):
        rows = np.flatnonzero(b.n == k)
        mask = encoding.target_mask(int(k)).astype(bool)
        for opt in encoding.targets:
            if not mask[opt.index]:
                continue
            slots = list(encoding.target_slots(opt.index, int(k)))
            x = X[rows, opt.index]
            kind = ("individual", "dyad", "group").index(opt.kind)
            x[:, kind] = 1.0
            x[:, 13] = b.kind_share[rows, kind]
            x[:, 3] = b.D[rows][:, slots].mean(axis=1)
            x[:, 4] = np.isin(worst[rows], slots)
            x[:, 5] = b.unt[rows][:, slots].mean(axis=1) / 10.0
            x[:, 6] = stance_out[rows][:, slots].mean(axis=1)
            mt = b.member_turn[rows][:, slots]
            if opt.kind == "individual":  # the turn, member by member
                x[:, 7:10] = mt[:, 0]
                # the client who spoke the last row, not the latest client: after the
                # therapist's own row real therapists go on with whom they addressed rather
                # than turn back to the latest client (leave-one-group-out NLL per move:
                # couples 0.92 -> 0.86, families 1.50 -> 1.47; README, the prior's table)
                x[:, 7] *= 1.0 - b.turn[rows, 0]
            elif opt.kind == "dyad":
                x[:, 10] = mt[:, :, 0].max(axis=1)
            else:  # the whole group: after the therapist addressed it, or spoke last
                x[:, 11] = mt[:, :, 1].min(axis=1)
                x[:, 12] = b.turn[rows, 0]
                # no client has spoken yet: family therapists open to the whole family;
                # without it an opening has no turn and reads as the training mean
                x[:, 14] = b.opening[rows]
            X[rows, opt.index] = x
            valid[rows, opt.index] = True
    return X, valid


# ---------------------------------------------------------------------------------------------
# linear heads (fitted with scikit-learn, applied with numpy)


@dataclass
class Linear:
    """A fitted logistic head: standardisation (``nan`` inputs take the training mean), then
    ``X @ coef.T + intercept``."""

    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: np.ndarray
    classes: list[int]

    @classmethod
    def fit(cls, X: np.ndarray, y: np.ndarray, C: float, free: Sequence[int] = ()) -> Linear:
        """Maximum likelihood with an L2 penalty of inverse strength ``C`` on every
        standardised column but the intercept and the ``free`` ones (whose penalty is
        divided by :data:`FREE_WEIGHT` squared): as ``C`` shrinks, the head tends to the
        training label frequencies (binary, multinomial) or to the model of the ``free``
        columns alone (the target head's roles)."""
        from sklearn.linear_model import LogisticRegression

        mean = np.nanmean(X, axis=0)
        mean = np.where(np.isnan(mean), 0.0, mean)
        scale = np.nanstd(X, axis=0)
        scale = np.where(~np.isfinite(scale) | (scale < 1e-8), 1.0, scale)
        scale[list(free)] /= FREE_WEIGHT  # a larger column needs a smaller, less penalised weight
        Z = np.nan_to_num((X - mean) / scale)
        model = LogisticRegression(C=C, max_iter=2000).fit(Z, y)
        return cls(mean, scale, model.coef_, model.intercept_, [int(c) for c in model.classes_])

    def logits(self, X: np.ndarray) -> np.ndarray:
        Z = np.nan_to_num((X - self.mean) / self.scale)
        return Z @ self.coef.T + self.intercept

    def to_dict(self) -> dict[str, Any]:
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Linear:
        return cls(*(np.asarray(d[k], float) for k in ("mean", "scale", "coef", "intercept")), [int(c) for c in d["classes"]])


def _class_probs(lin: Linear, X: np.ndarray, n_classes: int) -> np.ndarray:
    """``(B, n_classes)`` probabilities of a multinomial head: classes unseen in its fit get
    the floor only; every class is floored at ``EPSILON / n_classes``."""
    z = lin.logits(X)
    full = np.full((len(X), n_classes), -np.inf)
    if len(lin.classes) == 2 and z.shape[1] == 1:  # sklearn's binary form
        z = np.concatenate([np.zeros_like(z), z], axis=1)
    full[:, lin.classes] = z
    return (1 - EPSILON) * _softmax(full) + EPSILON / n_classes


def _softmax(z: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
    if valid is not None:
        z = np.where(valid, z, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


# ---------------------------------------------------------------------------------------------
# real decisions


@dataclass
class Decisions:
    """The real therapists' decisions of one scenario, as a fit takes them."""

    states: list[GroupState]
    speak: list[int]  # 1/0 after a client row; -1 after a therapist row (not a speak decision)
    target: list[tuple[int, ...]]  # addressed slots of a therapist move; () when none
    strategy: list[int]  # strategy index of a therapist move; -1 when none
    group: list[str]  # the couple or family (:func:`~rescue_env.data.groups.session_groups`)


def real_decisions(dialogues: Sequence[Dialogue], scenario: str) -> Decisions:
    """Every decision point of ``scenario``'s dialogues: the state after row k and what the
    therapist did at row k+1 (speak or not; whom, with which strategy, as the STP/SSP gold
    reads it: the first strategy item's target, else the row's). A therapist's move after its
    own row is a decision too (``speak`` -1), the session's opening move included (the state
    before the first row): STP and SSP ask about both."""
    strat = {s: i for i, s in enumerate(strategies(scenario))}
    out = Decisions([], [], [], [], [])
    mine = [d for d in dialogues if d.scenario == scenario]
    groups = session_groups(mine)
    for d in mine:
        group = groups[d.sample_id]
        tracker = StateTracker(d.scenario, d.participants)
        for k, row in enumerate(d.rows):
            prev_client = k > 0 and not d.rows[k - 1].is_therapist
            move = row.is_therapist and bool(row.support_strategy)
            if prev_client or move:
                slots: tuple[int, ...] = ()
                s = -1
                if move:
                    first = row.support_strategy[0]
                    slots = tuple(sorted(tracker.addressed_slots(first.target or row.target)))
                    s = strat.get(first.strategy_type, -1)
                out.states.append(tracker.state.copy())
                out.speak.append(int(row.is_therapist) if prev_client else -1)
                out.target.append(slots)
                out.strategy.append(s)
                out.group.append(group)
            tracker.update(row)
    return out


# ---------------------------------------------------------------------------------------------
# the prior


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


@dataclass
class _Head:
    """One head's training rows: features, labels, the couple/family of each row and, for the
    target head, the decision each (decision, option) pair belongs to (``None`` for the
    speak and strategy heads)."""

    X: np.ndarray
    y: np.ndarray
    groups: np.ndarray
    decision: np.ndarray | None
    #: the labels of a multinomial head (the strategy count), ``None`` for a binary one
    n_classes: int | None = None
    #: columns shrunk far less than the others (:meth:`Linear.fit`)
    free: tuple[int, ...] = ()

    def fit(self, C: float, rows: np.ndarray | None = None) -> Linear:
        rows = np.arange(len(self.y)) if rows is None else rows
        y = self.y[rows]
        if len(set(y.tolist())) < 2:
            return _constant(self.X.shape[1], float(y[0]) if set(y.tolist()) <= {0, 1} else 0.5)
        return Linear.fit(self.X[rows], y, C, self.free)

    def out_of_group(self, C: float) -> np.ndarray:
        """Probabilities of the binary head for each row from a fit without its group."""
        p = np.zeros(len(self.y))
        for g in np.unique(self.groups):
            held = self.groups == g
            p[held] = _sigmoid(self.fit(C, np.flatnonzero(~held)).logits(self.X[held])[:, 0])
        return p

    def held_out_nll(self, C: float) -> float:
        """The mean negative log-likelihood of each decision's label under fits without the
        decision's group (leave-one-group-out; probabilities floored as
        :meth:`ScenarioPrior.heads` floors them)."""
        nll, count = 0.0, 0
        for g in np.unique(self.groups):
            held = self.groups == g
            lin = self.fit(C, np.flatnonzero(~held))
            X, y = self.X[held], self.y[held]
            if self.decision is not None:  # target: softmax over each decision's options
                z = lin.logits(X)[:, 0]
                _, inv, size = np.unique(self.decision[held], return_inverse=True, return_counts=True)
                top = np.full(len(size), -np.inf)
                np.maximum.at(top, inv, z)
                e = np.exp(z - top[inv])
                p = (1 - EPSILON) * e / np.bincount(inv, e)[inv] + EPSILON / size[inv]
                nll -= float(np.log(p[y == 1]).sum())
                count += len(size)
            elif self.n_classes is None:  # speak
                p = (1 - 2 * EPSILON) * _sigmoid(lin.logits(X)[:, 0]) + EPSILON
                nll -= float(np.log(np.where(y == 1, p, 1 - p)).sum())
                count += len(y)
            else:  # strategy
                p = _class_probs(lin, X, self.n_classes)
                nll -= float(np.log(p[np.arange(len(y)), y]).sum())
                count += len(y)
        return nll / max(count, 1)

    def choose_C(self, grid: Sequence[float] = C_GRID) -> float:
        """The inverse L2 strength of ``grid`` with the best held-out log-likelihood
        (:meth:`held_out_nll`) on this head's own rows, a group k-fold inside the training
        data; the strongest on a tie. A proper score, so the chosen head stays calibrated
        (top-1 accuracy as the criterion was tried: no better on the real slices, and it
        is blind to the probabilities the KL penalty uses). With a single group there is
        nothing to hold out: the grid's middle."""
        if len(np.unique(self.groups)) < 2:
            return float(np.median(grid))
        losses = [round(self.held_out_nll(c), 9) for c in grid]
        return float(grid[int(np.argmin(losses))])


def _target_pairs(dec: Decisions, move_idx: np.ndarray, scenario: str) -> _Head:
    """The target head's rows: one per (decision, valid option), labelled 1 at the gold."""
    Xs, ys, gs, ds = [], [], [], []
    for size in sorted({dec.states[i].n for i in move_idx}):
        rows = [int(i) for i in move_idx if dec.states[i].n == size]
        enc = ActionEncoding(scenario, max(size, DEFAULT_MAX_MEMBERS[scenario]))
        X, valid = option_features(batch_from_states([dec.states[i] for i in rows], enc.max_members), enc)
        for r, i in enumerate(rows):
            gold = enc.target_for_slots(dec.target[i], size)
            for t in np.flatnonzero(valid[r]):
                Xs.append(X[r, t])
                ys.append(int(t == gold))
                gs.append(dec.group[i])
                ds.append(i)
    return _Head(np.array(Xs), np.array(ys), np.array(gs), np.array(ds), None, TARGET_ROLES)


class ScenarioPrior:
    """The three heads for one scenario (its patterns and strategies)."""

    def __init__(self, scenario: str, speak: Linear, target: Linear, strategy: Linear, itp_threshold: float, n: dict[str, float]):
        self.scenario = scenario
        self.speak, self.target, self.strategy = speak, target, strategy
        #: the p_speak above which ITP answers "speak" (:func:`balanced_f1_threshold`)
        self.itp_threshold = itp_threshold
        self.n = n
        self.n_patterns = len(patterns(scenario))
        self.n_strategies = len(strategies(scenario))

    @classmethod
    def fit(cls, dialogues: Sequence[Dialogue], scenario: str, C: float | dict[str, float] | None = None) -> ScenarioPrior:
        """Fit the three heads on ``scenario``'s decisions in ``dialogues``.

        ``C`` (inverse L2 strength) for every head, or per head (``{"speak": .., "target": ..,
        "strategy": ..}``); by default each head chooses its own among :data:`C_GRID` by the
        held-out log-likelihood of leave-one-group-out fits inside ``dialogues``
        (:meth:`_Head.choose_C`; never on data outside them). ITP's threshold is chosen on
        leave-one-group-out predictions within ``dialogues`` (a couple's or family's sessions
        leave together; in-sample ones when they hold one group).
        """
        dec = real_decisions(dialogues, scenario)
        speak_idx = np.array([i for i, y in enumerate(dec.speak) if y >= 0], int)
        move_idx = np.array([i for i, (t, s) in enumerate(zip(dec.target, dec.strategy)) if t and s >= 0], int)
        if not len(speak_idx) or not len(move_idx):
            raise ValueError(f"no {scenario} therapist move to fit the behaviour prior on; give dialogues with {scenario} sessions (data.path or agent.fit_data)")
        cap = max(max(st.n for st in dec.states), DEFAULT_MAX_MEMBERS[scenario])
        n_pat = len(patterns(scenario))
        Xg = group_features(batch_from_states(dec.states, cap), n_pat)
        groups = np.array(dec.group)
        y_speak = np.array(dec.speak)[speak_idx]
        heads = {
            "speak": _Head(speak_view(Xg, scenario)[speak_idx], y_speak, groups[speak_idx], None),
            "strategy": _Head(strategy_view(Xg, n_pat)[move_idx], np.array(dec.strategy)[move_idx], groups[move_idx], None, len(strategies(scenario))),
            "target": _target_pairs(dec, move_idx, scenario),
        }
        from threadpoolctl import threadpool_limits

        # one BLAS thread: on these small problems threads only contend (5x slower on a busy
        # 2-core machine)
        with threadpool_limits(1):
            return cls._fit_heads(scenario, heads, y_speak, heads["speak"].X, C)

    @classmethod
    def _fit_heads(cls, scenario: str, heads: dict[str, _Head], y_speak: np.ndarray, X_speak: np.ndarray, C: float | dict[str, float] | None) -> ScenarioPrior:
        fixed = {} if C is None else C if isinstance(C, dict) else {h: C for h in heads}
        fitted: dict[str, Linear] = {}
        chosen: dict[str, float] = {}
        oof_speak = None
        for name, head in heads.items():
            c = chosen[name] = float(fixed[name]) if name in fixed else head.choose_C()
            fitted[name] = head.fit(c)
            if name == "speak" and len(set(head.groups)) > 1 and len(set(y_speak)) > 1:
                oof_speak = head.out_of_group(c)
        p_threshold = oof_speak if oof_speak is not None else _sigmoid(fitted["speak"].logits(X_speak)[:, 0])
        counts = {"speak_decisions": len(y_speak), "moves": int(len(np.unique(heads["target"].decision))), **{f"C_{k}": v for k, v in chosen.items()}}
        return cls(scenario, fitted["speak"], fitted["target"], fitted["strategy"], balanced_f1_threshold(p_threshold, y_speak), counts)

    def heads(self, batch: Batch, encoding: ActionEncoding) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(p_speak[B], p_target[B, T], p_strategy[B, S])`` (targets over valid options)."""
        Xg = group_features(batch, self.n_patterns)
        p_speak = 1.0 / (1.0 + np.exp(-self.speak.logits(speak_view(Xg, self.scenario))[:, 0]))
        p_speak = (1 - 2 * EPSILON) * p_speak + EPSILON
        p_strat = _class_probs(self.strategy, strategy_view(Xg, self.n_patterns), self.n_strategies)
        X, valid = option_features(batch, encoding)
        tl = self.target.logits(X.reshape(-1, X.shape[-1]))[:, 0].reshape(valid.shape)
        p_t = _softmax(tl, valid)
        p_t = np.where(valid, (1 - EPSILON) * p_t + EPSILON / valid.sum(axis=1, keepdims=True), 0.0)
        return p_speak, p_t, p_strat

    def to_dict(self) -> dict[str, Any]:
        return {"speak": self.speak.to_dict(), "target": self.target.to_dict(), "strategy": self.strategy.to_dict(), "itp_threshold": self.itp_threshold, "n": self.n}

    @classmethod
    def from_dict(cls, scenario: str, d: dict[str, Any]) -> ScenarioPrior:
        return cls(scenario, Linear.from_dict(d["speak"]), Linear.from_dict(d["target"]), Linear.from_dict(d["strategy"]), float(d["itp_threshold"]), dict(d["n"]))


def balanced_f1_threshold(p: np.ndarray, y: np.ndarray) -> float:
    """The threshold on ``p`` with the best F1 of "speak" once both classes weigh the same
    (ITP's instances are balanced 1:1 per sample), on the fit's own decisions."""
    if y.min() == y.max():
        return 0.5
    w = np.where(y == 1, 0.5 / y.mean(), 0.5 / (1 - y.mean()))
    best, best_t = -1.0, 0.5
    for t in np.unique(np.concatenate([p, [0.0]])):
        yes = p > t
        tp, fp, fn = (w * (yes & (y == 1))).sum(), (w * (yes & (y == 0))).sum(), (w * (~yes & (y == 1))).sum()
        f1 = 2 * tp / (2 * tp + fp + fn)
        if f1 > best + 1e-12:
            best, best_t = f1, float(t)
    return best_t


def _constant(n_features: int, p: float) -> Linear:
    p = min(max(p, EPSILON), 1 - EPSILON)
    return Linear(np.zeros(n_features), np.ones(n_features), np.zeros((1, n_features)), np.array([np.log(p / (1 - p))]), [0, 1])


class BehaviourPrior:
    """The fitted prior of each scenario in its data (see the module docstring).

    >>> prior = BehaviourPrior.fit(dialogues)               # doctest: +SKIP
    >>> prior.rank(state, ActionEncoding("couple"))          # doctest: +SKIP
    >>> prior.save("prior.json"); BehaviourPrior.load("prior.json")  # doctest: +SKIP
    """

    def __init__(self, scenarios: dict[str, ScenarioPrior], fitted_on: list[str]):
        self.scenarios = scenarios
        self.fitted_on = fitted_on

    @classmethod
    def fit(cls, dialogues: Sequence[Dialogue], scenarios: Sequence[str] | None = None, C: float | dict[str, float] | None = None) -> BehaviourPrior:
        """Fit every scenario of ``dialogues`` (or those named; ``ValueError`` when one has no
        therapist move)."""
        names = list(scenarios) if scenarios is not None else sorted({d.scenario for d in dialogues})
        if not names:
            raise ValueError("no dialogue to fit the behaviour prior on")
        return cls({s: ScenarioPrior.fit(dialogues, s, C) for s in names}, [d.sample_id for d in dialogues])

    def scenario(self, scenario: str) -> ScenarioPrior:
        try:
            return self.scenarios[scenario]
        except KeyError:
            raise PriorError(f"this behaviour prior was fitted on {sorted(self.scenarios)} dialogues only, not {scenario}; refit it on data with {scenario} sessions") from None

    # probabilities ------------------------------------------------------------------------
    def flat_probs(self, scenario: str, batch: Batch, encoding: ActionEncoding) -> np.ndarray:
        """``(B, A)`` distribution over the flat actions (listening = 1 − p_speak), zero on
        the targets ``encoding`` masks for each state's group."""
        p_speak, p_t, p_s = self.scenario(scenario).heads(batch, encoding)
        grid = p_t[:, :, None] * p_s[:, None, :]
        return np.concatenate([(1 - p_speak)[:, None], p_speak[:, None] * grid.reshape(len(grid), -1)], axis=1)

    def action_probs(self, state: GroupState, encoding: ActionEncoding) -> np.ndarray:
        """The distribution over ``encoding``'s flat actions in an extracted ``state``."""
        return self.flat_probs(state.scenario, batch_from_states([state], encoding.max_members), encoding)[0]

    def action_probs_from_obs(self, obs: np.ndarray, observer: Any, encoding: ActionEncoding) -> np.ndarray:
        """``(B, A)`` on flat env observations (the turn features at their training mean)."""
        return self.flat_probs(encoding.scenario, batch_from_obs(obs, observer, encoding.scenario), encoding)

    def rank(self, state: GroupState, encoding: ActionEncoding) -> Ranking:
        p_speak, p_t, p_s = self.scenario(state.scenario).heads(batch_from_states([state], encoding.max_members), encoding)
        return Ranking(float(p_speak[0]), p_t[0], p_s[0])

    # files --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the prior as JSON (atomically); returns the path."""
        from sklearn import __version__ as sklearn_version

        doc = {
            "format": FORMAT, "version": VERSION, "sklearn": sklearn_version, "fitted_on": self.fitted_on,
            "scenarios": {s: p.to_dict() for s, p in self.scenarios.items()},
        }  # fmt: skip
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(doc))
        return path

    @classmethod
    def load(cls, path: str | Path) -> BehaviourPrior:
        """Read a file :meth:`save` wrote; :class:`PriorError` for anything else
        (:class:`PriorFileNotFound`, also a ``FileNotFoundError``, for a missing file)."""
        p = Path(path)
        if not p.exists():
            raise PriorFileNotFound(f"behaviour prior file {p} does not exist (fit one: rescue train experiment=grounded writes prior.json, or rescue_env.agents.prior.BehaviourPrior.fit(...).save(path))")
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:  # a directory, unreadable, not text
            raise PriorError(f"{p} is not a readable behaviour prior file ({exc.__class__.__name__}: {exc})") from None
        except json.JSONDecodeError as exc:
            raise PriorError(f"{p} is not a behaviour prior file (not JSON: {exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise PriorError(f"{p} is not a behaviour prior file (no format {FORMAT!r})")
        if doc.get("version") != VERSION:
            raise PriorError(f"{p} is a behaviour prior of format version {doc.get('version')}, this code reads version {VERSION}; refit it")
        return cls({s: ScenarioPrior.from_dict(s, d) for s, d in doc["scenarios"].items()}, list(doc.get("fitted_on", [])))


# ---------------------------------------------------------------------------------------------
# the agent


class PriorAgent:
    """``agent=imitation``: acts and ranks as the behaviour prior does.

    ``speak_threshold`` (ITP's decision) is the prior's threshold with the best F1 on its own
    decisions weighted 1:1, as ITP's instances are: whether a therapist enters after a
    client's turn is barely predictable from the state (AUC about 0.55 by group k-fold), and
    F1 then favours answering "speak" unless the prior is fairly sure of "listen".
    """

    name = "imitation"

    def __init__(self, prior: BehaviourPrior, scenario: str, encoding: ActionEncoding | None = None, *, deterministic: bool = False, seed: int | None = None):
        self.prior = prior
        self.scenario = scenario
        self.encoding = encoding or ActionEncoding(scenario)
        self.speak_threshold = prior.scenario(scenario).itp_threshold
        self.deterministic = deterministic
        self.rng = np.random.default_rng(seed)

    def reset(self, *, seed: int | None = None) -> None:
        if seed is not None:
            self.rng = np.random.default_rng(seed)

    def act(self, observation: Any, action_mask: np.ndarray, state: GroupState | None = None) -> int:
        if state is None:
            raise ValueError("the imitation agent needs the group state: pass info['state'] from the env")
        probs = self.prior.action_probs(state, self.encoding) * action_mask
        if probs[1:].sum() <= 0:
            return 0
        if self.deterministic:  # speak when more likely than not, then the likeliest move
            return int(np.argmax(probs[1:])) + 1 if probs[1:].sum() >= 0.5 else 0
        return int(self.rng.choice(len(probs), p=probs / probs.sum()))

    def rank(self, state: GroupState, encoding: ActionEncoding) -> Ranking:
        return self.prior.rank(state, encoding)


# ---------------------------------------------------------------------------------------------
# validation


def cross_validate(dialogues: Sequence[Dialogue], tasks: Sequence[str] = ("itp", "stp", "ssp"), profile: str = "paper", C: float | dict[str, float] | None = None) -> dict[str, Any]:
    """Leave-one-group-out validation of the prior against the majority baseline.

    Each fold holds out one couple or family (:func:`~rescue_env.data.groups.session_groups`: all its sessions), fits
    the prior and the majority baseline on the rest, and answers the held-out sessions' task
    instances; the answers of all folds are pooled and scored once (micro average, as the
    task runner does). Returns ``{predictor: {task: figures with by_scenario}}``, the folds
    and ``paired`` (``{task: {scenario: counts}}``, :func:`paired_counts`)
    """
    from rescue_env.tasks.instances import build_instances
    from rescue_env.tasks.predictors import AgentPredictor, MajorityPredictor
    from rescue_env.tasks.runner import aggregate, score_itp, score_ranking

    by_id = session_groups(dialogues)
    groups = [by_id[d.sample_id] for d in dialogues]
    records: dict[str, dict[str, list[dict]]] = {"prior": {t: [] for t in tasks}, "majority": {t: [] for t in tasks}}
    for held in sorted(set(groups)):
        test = [d for d, g in zip(dialogues, groups) if g == held]
        train = [d for d, g in zip(dialogues, groups) if g != held]
        scns = sorted({d.scenario for d in test} & {d.scenario for d in train})
        test = [d for d in test if d.scenario in scns]
        if not test:
            continue
        prior = BehaviourPrior.fit(train, scns, C)
        predictors = {
            "prior": AgentPredictor(lambda s, p=prior: PriorAgent(p, s, deterministic=True), name="imitation", fit_dialogues=train),
            "majority": MajorityPredictor(fit_dialogues=train),
        }
        for task in tasks:
            insts = list(build_instances(test, task, profile))
            for name, pred in predictors.items():
                pred.prepare(task, profile, test)
                for inst in insts:
                    p = pred.predict(task, inst)
                    rec = {"scenario": inst.scenario, "sample": inst.sample_id, "row_index": inst.row_index, "gold": inst.gold, "prediction": p.value, "failed": p.failed, "group": held}
                    rec.update(score_itp(inst, p) if task == "itp" else score_ranking(inst, p, profile))
                    records[name][task].append(rec)
    out: dict[str, Any] = {name: {t: aggregate(t, recs, profile) for t, recs in by_task.items()} for name, by_task in records.items()}
    out["folds"] = sorted(set(groups))
    out["paired"] = {t: paired_counts(records["prior"][t], records["majority"][t]) for t in tasks}
    return out


def paired_counts(prior: Sequence[dict], majority: Sequence[dict]) -> dict[str, dict[str, int]]:
    """Per scenario, over the same instances in the same order: ``n``, how many each
    predictor answers right (``prior``, ``majority``; top-1 for a ranking) and the discordant
    pairs (``prior_only``, ``majority_only``: right by one and not the other), from which an
    exact McNemar test says whether the two differ by more than chance."""
    out: dict[str, dict[str, int]] = {}
    for a, b in zip(prior, majority, strict=True):
        assert a["sample"] == b["sample"] and a["row_index"] == b["row_index"], "the predictors answered different instances"
        c = out.setdefault(a["scenario"], {"n": 0, "prior": 0, "majority": 0, "prior_only": 0, "majority_only": 0})
        ra, rb = bool(a["correct"]), bool(b["correct"])
        c["n"] += 1
        c["prior"] += ra
        c["majority"] += rb
        c["prior_only"] += ra and not rb
        c["majority_only"] += rb and not ra
    return out
