"""The calibrated model, batched: N sessions stepped in one compiled call (numba).

:class:`~rescue_env.dynamics.calibrated.CalibratedBackend` with
:class:`~rescue_env.session.Session` and :class:`~rescue_env.envs.common.EpisodeBook` is
the reference: readable, one session at a time, and what every rollout, the PettingZoo env
and the LLM comparisons use. Training spends most of its time in that step, so
:class:`~rescue_env.envs.vec_env.GroupSupportVecEnv` runs this kernel instead: the same
arithmetic in the same order (``tests/dynamics/test_batched.py`` holds the two bit-equal
over thousands of steps of both scenarios), on arrays that hold every session's state.

The random draws stay in Python, on each session's own ``numpy.random.Generator`` and in
the reference's order (``6 + n`` uniforms, then ``n + n²`` normals per step), so a seed gives
the same episode on either path.

Layout of the per-session arrays (row ``e`` is session ``e``; groups padded to the cap):

* ``D[e, :n]`` distress, ``G[e, :n, :n]`` stances (float64; padding stays 0);
* ``I[e]`` integers, indexed by the ``I_*`` constants; ``F[e]`` floats, by ``F_*``;
* ``UNT[e, :n]`` rows since each member was addressed; ``TURNS[e, :n]`` untended turns
  of the episode (the book's count).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from rescue_env.dynamics.calibrated import CalibratedBackend
from rescue_env.reward import RewardConfig
from rescue_env.taxonomy.actions import ActionEncoding
from rescue_env.taxonomy.labels import UTTERANCE_TYPES

# I[e, ·]
I_N, I_PATTERN, I_T, I_STREAK, I_INTERVENTIONS, I_ROW, I_INVALID, I_SETTLED = range(8)
I_LAST_SPEAKER, I_LAST_STRATEGY, I_LAST_TARGET = 8, 9, 10
N_INT = 11
#: "unchanged since reset" in the I_LAST_* columns (the Python state keeps its value)
KEEP = -1
# F[e, ·]
F_RETURN, F_DISCOUNT, F_MEAN, F_STANCE, F_MAX, F_COST, F_PEAK = range(7)
N_FLOAT = 7
# P[·]: scalar parameters, reward weights and episode settings
(
    P_DYAD_SHARE,
    P_GROUP_SHARE,
    P_GROWTH,
    P_SIDELINE,
    P_CONTAGION,
    P_D_NOISE,
    P_S_NOISE,
    P_SPEAK_ADDRESSED,
    P_SPEAK_DISTRESS,
    P_ANSWER,
    P_W_MEAN,
    P_BETA,
    P_LAM,
    P_COST,
    P_GAMMA,
    P_SETTLE_THRESHOLD,
    P_SETTLE_STEPS,
    P_TERMINATE,
    P_HORIZON,
) = range(19)
N_PARAMS = 19

_KIND_NEGATIVE, _KIND_POSITIVE = -1, 1


@njit(cache=True)
def _bisect_right(a, x):
    lo, hi = 0, a.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if x < a[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True)
def step_batch(
    actions, D, G, I, F, UNT, TURNS, U, NOISE,
    act_intervene, act_target, act_strategy, target_slots, target_valid,
    P, effect, soften, pressure, second_turn, cum_utterance, utterance_kind, utterance_effect, harden, cum_transition, fatigue_pow,
    obs, rewards, terminated, truncated,
):  # fmt: skip
    """One step of every session; writes observations, rewards and episode ends.

    Mirrors, in order: ``Session.step`` (action decoding, ``CalibratedBackend.step``,
    bookkeeping), ``EpisodeBook.record`` (σ* and its components) and
    ``Observer.flat_values``. A comment names the reference line where the order of
    floating-point operations matters.
    """
    n_sessions = actions.shape[0]
    cap = D.shape[1]
    n_utterance = cum_utterance.shape[1]
    none = cum_transition.shape[1] - 1
    n_pattern_slots = none + 1
    addressed = np.zeros(cap, dtype=np.bool_)
    inflow = np.zeros(cap)
    keys = np.zeros(cap)
    turn_slot = np.zeros(2, dtype=np.int64)
    turn_type = np.zeros(2, dtype=np.int64)
    turn_addressee = np.zeros(2, dtype=np.int64)
    for e in range(n_sessions):
        n = I[e, I_N]
        p = I[e, I_PATTERN]
        d = D[e]
        g = G[e]
        u = U[e]
        a = actions[e]
        # -- decode (Session.move_for): a target naming an absent member is listening
        intervene = False
        invalid = False
        s = -1
        target = -1
        if act_intervene[a]:
            target = act_target[a]
            if target_valid[n, target]:
                intervene = True
                s = act_strategy[a]
            else:
                invalid = True
        k = 0
        for i in range(cap):
            addressed[i] = intervene and target_slots[n, target, i]
            if addressed[i]:
                k += 1
        streak = I[e, I_STREAK]
        mult = fatigue_pow[streak] if intervene else 0.0
        # -- 1. therapist effect
        if intervene:
            share = 1.0 if k == 1 else (P[P_GROUP_SHARE] if k >= n else P[P_DYAD_SHARE])
            worst = 0
            for i in range(1, n):
                if d[i] > d[worst]:
                    worst = i
            eff = effect[p, s] * mult * share
            soft = soften[s] * mult * share
            for i in range(n):
                if addressed[i]:
                    d[i] += eff
                    for j in range(n):
                        g[i, j] += soft * (1.0 - g[i, j])
            if not addressed[worst]:
                d[worst] += P[P_SIDELINE]
        # -- 2. bucket effect
        grow = 1.0 + P[P_GROWTH]
        push = pressure[p]
        for i in range(n):
            d[i] = (d[i] if addressed[i] else d[i] * grow) + push
        # -- 3. client turns (CalibratedBackend._choose_turns), chosen before any takes effect
        n_turns = 2 if (n > 1 and u[0] < second_turn[p]) else 1
        a_w = P[P_SPEAK_ADDRESSED]
        d_w = P[P_SPEAK_DISTRESS]
        for i in range(n):
            x = u[4 + i]
            if x == 0.0:
                x = 1e-12
            keys[i] = a_w * (1.0 if addressed[i] else 0.0) + d_w * d[i] - math.log(-math.log(x))
        for t_k in range(n_turns):
            best = -1
            for i in range(n):  # the stable descending sort's order: lowest slot on ties
                if t_k == 1 and i == turn_slot[0]:
                    continue
                if best < 0 or keys[i] > keys[best]:
                    best = i
            slot = best
            cum_u = cum_utterance[p]
            utype = min(_bisect_right(cum_u, u[1 + t_k] * cum_u[n_utterance - 1]), n_utterance - 1)
            addressee = -1
            if n > 1 and not (addressed[slot] and u[3] < P[P_ANSWER]):
                kind = utterance_kind[utype]
                pick = -1
                for j in range(n):
                    if j == slot:
                        continue
                    if pick < 0:
                        pick = j
                    elif kind == _KIND_NEGATIVE:
                        if g[slot, j] < g[slot, pick]:
                            pick = j
                    elif kind == _KIND_POSITIVE:
                        if g[slot, j] > g[slot, pick]:
                            pick = j
                    elif abs(g[slot, j]) < abs(g[slot, pick]):
                        pick = j
                if kind != 0 or not addressed[slot]:
                    addressee = pick
            turn_slot[t_k] = slot
            turn_type[t_k] = utype
            turn_addressee[t_k] = addressee
        for t_k in range(n_turns):
            addressee = turn_addressee[t_k]
            slot = turn_slot[t_k]
            if addressee >= 0 and addressee != slot:
                d[addressee] += utterance_effect[turn_type[t_k], 0]
                g[addressee, slot] += utterance_effect[turn_type[t_k], 1]
        # -- 4. ripple along hostile edges
        if n > 1:
            c = P[P_CONTAGION] / (n - 1)
            for i in range(n):
                inflow[i] = 0.0
                for j in range(n):
                    if j != i and d[j] > d[i]:
                        hostility = -0.5 * (g[i, j] + g[j, i])
                        if hostility > 0:
                            inflow[i] += hostility * (d[j] - d[i])
            for i in range(n):
                d[i] += c * inflow[i]
        # -- 5. stance drift, noise, clipping
        h = harden[p]
        toward, rate = (-1.0, h) if h >= 0 else (1.0, -h)
        noise = NOISE[e]
        dn = P[P_D_NOISE]
        sn = P[P_S_NOISE]
        for i in range(n):
            x = d[i] + dn * noise[i]
            d[i] = 0.0 if x < 0.0 else (1.0 if x > 1.0 else x)
            base = n + i * n
            for j in range(n):
                if j == i:
                    g[i, j] = 0.0
                    continue
                y = g[i, j] + rate * (toward - g[i, j]) + sn * noise[base + j]
                g[i, j] = -1.0 if y < -1.0 else (1.0 if y > 1.0 else y)
        # -- 6. pattern transition
        row = 1 + s if (intervene and u[4 + n] < mult) else 0
        cum = cum_transition[row, p]
        nxt = min(_bisect_right(cum, u[5 + n] * cum[n_pattern_slots - 1]), none)
        I[e, I_PATTERN] = nxt
        # -- session bookkeeping (Session.step)
        for i in range(n):
            UNT[e, i] = 0 if addressed[i] else UNT[e, i] + 1
        if intervene:
            I[e, I_LAST_STRATEGY] = s
            I[e, I_LAST_TARGET] = target
            streak += 1
            I[e, I_INTERVENTIONS] += 1
        else:
            streak = 0
        I[e, I_STREAK] = streak
        I[e, I_LAST_SPEAKER] = turn_slot[n_turns - 1]
        t = I[e, I_T] + 1
        I[e, I_T] = t
        I[e, I_ROW] += (1 if intervene else 0) + n_turns
        # -- σ* and the book (sigma_star, EpisodeBook.record)
        total = 0.0
        max_d = d[0]
        for i in range(n):
            total += d[i]
            if d[i] > max_d:
                max_d = d[i]
        stance_total = 0.0
        for i in range(n):
            for j in range(n):
                stance_total += g[i, j]
        mean_stance = stance_total / (n * (n - 1)) if n >= 2 else 0.0
        c_mean = -P[P_W_MEAN] * (total / n)
        c_stance = P[P_BETA] * mean_stance
        c_max = -P[P_LAM] * max_d
        c_cost = -P[P_COST] * (1.0 if intervene else 0.0)
        reward = c_mean + c_stance + c_max + c_cost
        F[e, F_RETURN] += F[e, F_DISCOUNT] * reward
        F[e, F_DISCOUNT] *= P[P_GAMMA]
        F[e, F_MEAN] += c_mean
        F[e, F_STANCE] += c_stance
        F[e, F_MAX] += c_max
        F[e, F_COST] += c_cost
        worst_d = -c_max / P[P_LAM] if P[P_LAM] != 0.0 else max_d
        if worst_d > F[e, F_PEAK]:
            F[e, F_PEAK] = worst_d
        if invalid:
            I[e, I_INVALID] += 1
        for i in range(n):
            if not addressed[i]:
                TURNS[e, i] += 1
        settled = I[e, I_SETTLED] + 1 if worst_d < P[P_SETTLE_THRESHOLD] else 0
        I[e, I_SETTLED] = settled
        term = P[P_TERMINATE] != 0.0 and settled >= P[P_SETTLE_STEPS]
        terminated[e] = term
        truncated[e] = (not term) and t >= P[P_HORIZON]
        rewards[e] = reward
        # -- observation (Observer.flat_values: distress, pattern, present, stance, tempo, untended)
        o = obs[e]
        for i in range(cap):
            o[i] = d[i]
        off = cap
        for q in range(n_pattern_slots):
            o[off + q] = 1.0 if q == nxt else 0.0
        off += n_pattern_slots
        for i in range(cap):
            o[off + i] = 1.0 if i < n else 0.0
        off += cap
        for i in range(cap):
            for j in range(cap):
                o[off + i * cap + j] = g[i, j]
        off += cap * cap
        horizon = P[P_HORIZON]
        o[off] = t / horizon if t < horizon else 1.0
        o[off + 1] = streak / 3.0 if streak < 3 else 1.0
        off += 2
        for i in range(cap):
            x = UNT[e, i]
            o[off + i] = (0.1 * x if x < 10 else 1.0) if i < n else 0.0


class BatchedCalibrated:
    """The packed tables of one calibrated backend, action encoding and reward, and the
    state arrays of ``num_sessions`` sessions; :meth:`step` runs :func:`step_batch`, which
    writes each session's flat observation into row ``e`` of ``obs`` (float32, ``(N, D)``,
    owned by the caller)."""

    def __init__(
        self,
        backend: CalibratedBackend,
        encoding: ActionEncoding,
        reward: RewardConfig,
        *,
        num_sessions: int,
        horizon: int,
        settle_threshold: float,
        settle_steps: int,
        terminate_on_settle: bool,
        obs: np.ndarray,
    ):
        sp = backend.params
        cap = encoding.max_members
        self.cap = cap
        self.backend = backend
        self.encoding = encoding
        A = encoding.n_actions
        self.act_intervene = np.zeros(A, np.bool_)
        self.act_target = np.zeros(A, np.int64)
        self.act_strategy = np.zeros(A, np.int64)
        for a in range(1, A):
            dec = encoding.decode(a)
            self.act_intervene[a] = True
            self.act_target[a] = dec.target
            self.act_strategy[a] = dec.strategy
        T = encoding.n_targets
        self.target_slots = np.zeros((cap + 1, T, cap), np.bool_)
        self.target_valid = np.zeros((cap + 1, T), np.bool_)
        for n in range(1, cap + 1):
            self.target_valid[n] = encoding.target_mask(n).astype(bool)
            for t in range(T):
                for i in encoding.target_slots(t, n):
                    self.target_slots[n, t, i] = True
        P = np.zeros(N_PARAMS)
        P[P_DYAD_SHARE], P[P_GROUP_SHARE] = sp.dyad_share, sp.group_share
        P[P_GROWTH], P[P_SIDELINE], P[P_CONTAGION] = sp.untended_growth, sp.sideline_penalty, sp.contagion
        P[P_D_NOISE], P[P_S_NOISE] = sp.distress_noise, sp.stance_noise
        P[P_SPEAK_ADDRESSED], P[P_SPEAK_DISTRESS], P[P_ANSWER] = sp.speak_addressed, sp.speak_distress, sp.answer_therapist
        P[P_W_MEAN], P[P_BETA], P[P_LAM], P[P_COST], P[P_GAMMA] = reward.w_mean, reward.beta, reward.lam, reward.cost, reward.gamma
        P[P_SETTLE_THRESHOLD], P[P_SETTLE_STEPS] = settle_threshold, settle_steps
        P[P_TERMINATE], P[P_HORIZON] = float(terminate_on_settle), horizon
        self.P = P
        self.effect = np.ascontiguousarray(sp.effect, np.float64)
        self.soften = np.ascontiguousarray(sp.soften, np.float64)
        self.pressure = np.ascontiguousarray(sp.pattern_pressure, np.float64)
        self.second_turn = np.ascontiguousarray(sp.second_turn, np.float64)
        self.cum_utterance = np.array(backend._cum_utterance, np.float64)
        self.utterance_effect = np.ascontiguousarray(sp.utterance_effect, np.float64)
        self.harden = np.ascontiguousarray(sp.harden, np.float64)
        self.cum_transition = np.array(backend._cum_transition, np.float64)
        kinds = np.zeros(len(UTTERANCE_TYPES), np.int64)
        for name in ("accusation", "defense", "withdrawal"):
            kinds[UTTERANCE_TYPES.index(name)] = _KIND_NEGATIVE
        for name in ("repair", "validation"):
            kinds[UTTERANCE_TYPES.index(name)] = _KIND_POSITIVE
        self.utterance_kind = kinds
        # the reference computes fatigue ** streak in Python; a table keeps the exact values
        self.fatigue_pow = np.array([sp.fatigue**k for k in range(int(horizon) + 2)])
        N = num_sessions
        self.D = np.zeros((N, cap))
        self.G = np.zeros((N, cap, cap))
        self.I = np.zeros((N, N_INT), np.int64)
        self.F = np.zeros((N, N_FLOAT))
        self.UNT = np.zeros((N, cap), np.int64)
        self.TURNS = np.zeros((N, cap), np.int64)
        self.U = np.zeros((N, 6 + cap))
        self.NOISE = np.zeros((N, cap + cap * cap))
        self.obs = obs  # the caller's (N, D) float32 buffer: the kernel writes observations there
        self.rewards = np.zeros(N)
        self.terminated = np.zeros(N, np.bool_)
        self.truncated = np.zeros(N, np.bool_)

    def ensure_streak(self, streak: int) -> None:
        """Grow the ``fatigue ** streak`` table to cover ``streak`` and the next step's
        (the kernel indexes it unchecked; a horizon lowered mid-episode can leave a session
        past the table it was built for)."""
        if streak + 2 > self.fatigue_pow.shape[0]:
            fatigue = self.backend.params.fatigue
            self.fatigue_pow = np.array([fatigue**k for k in range(streak + 2)])

    def step(self, actions: np.ndarray) -> None:
        """Advance every session by its action (draws must already be in ``U``, ``NOISE``)."""
        step_batch(
            actions, self.D, self.G, self.I, self.F, self.UNT, self.TURNS, self.U, self.NOISE,
            self.act_intervene, self.act_target, self.act_strategy, self.target_slots, self.target_valid,
            self.P, self.effect, self.soften, self.pressure, self.second_turn, self.cum_utterance, self.utterance_kind,
            self.utterance_effect, self.harden, self.cum_transition, self.fatigue_pow,
            self.obs, self.rewards, self.terminated, self.truncated,
        )  # fmt: skip
