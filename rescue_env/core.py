"""The simulator core: the state of N sessions as arrays and every number the model moves.

Everything numeric is here, once, compiled with numba and batched over sessions:

* the calibrated client model's transition (:func:`_transition`; its seven parts are stated
  in :mod:`rescue_env.dynamics.calibrated`): therapist effect, bucket effect, client turns,
  ripple, stance drift and noise, pattern transition, turn-taking;
* the bookkeeping of a step (untended counters, streak, rows) and the episode book: σ* and
  its weighted components (:mod:`rescue_env.reward`), discounted return, peaks, untended
  turns, settling, termination and truncation (:func:`_finish`);
* the client population (per-client traits drawn at each reset, :func:`_draw_traits`) and
  the observation model (the distress the policy sees is a noisy reading of latent distress);
* the flat observation (:func:`_observe`, gymnasium's ``flatten`` layout of the envs'
  ``Dict`` observation) and the action masks (a table per group size);
* resets from start states computed once per seed dialogue and cut row when the data is
  loaded (:class:`StartTable`): a reset copies a row of the table, it never replays
  annotated rows.

Randomness is counter-based: every draw is a hash (splitmix64) of the session's episode key,
the step number and the draw's index, so a session's episode depends on its key only —
not on N, on its place in the batch, or on what other sessions do. An episode's key comes
from the env's seeded generator at ``reset(seed=...)``; the next episode's key (a reset
without a seed, or an auto-reset) is the hash of the previous one. Normals are Box–Muller
pairs of such uniforms.

The envs (:mod:`rescue_env.envs`) are thin adapters: the Gymnasium env is a core with
N = 1, the vector envs a core with N sessions, the PettingZoo env N = 1 with client agents'
behaviours. LLM client dynamics run :meth:`Core.transition` (who speaks, the calibrated
drift of the silent members, the pattern draw), overwrite the speakers' distress and
stances (and the pattern) with :meth:`Core.set_state`, then :meth:`Core.finish`.

Array layout (row ``e`` is session ``e``; groups padded to the cap ``C``):
``D[e, :n]`` distress and ``G[e, :n, :n]`` stances (float64, padding 0); ``I[e]`` integers by
the ``I_*`` columns; ``F[e]`` floats by the ``F_*`` columns; ``UNT[e, :n]`` steps since
each member was addressed; ``TURNS[e, :n]`` untended turns of the episode; ``KEY[e]`` the
episode key; ``TR[e, :n, ·]`` the clients' latent traits (reactivity, volatility, contagion
susceptibility, baseline offset, then the warmth of each dyad ``TR[e, i, TR_WARMTH + j]``;
drawn at reset from the key, see :mod:`rescue_env.dynamics.calibrated`); the
last step's client turns in ``TS/TT/TA[e, :I[e, I_NTURNS]]`` (speaker slot,
utterance type, addressee).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
from numba import njit

from rescue_env.data.schema import Dialogue
from rescue_env.dynamics.params import ScenarioParams
from rescue_env.reward import RewardConfig
from rescue_env.state import GroupState, StateTracker
from rescue_env.taxonomy.actions import ActionEncoding
from rescue_env.taxonomy.labels import UTTERANCE_TYPES

# I[e, ·]
(
    I_N, I_PATTERN, I_T, I_STREAK, I_INTERVENTIONS, I_ROW, I_INVALID, I_SETTLED,
    I_LAST_SPEAKER, I_LAST_STRATEGY, I_LAST_TARGET, I_START, I_NTURNS, I_INTERVENED, I_STEP_INVALID, I_DONE,
) = range(16)  # fmt: skip
N_INT = 16
#: ``I_LAST_*`` value: unchanged since the start state (the seed rows' value holds)
KEEP = -1
#: ``I_DONE`` values
RUNNING, TERMINATED, TRUNCATED = 0, 1, 2
# F[e, ·]: episode sums, then the last step's reward and weighted components
(
    F_RETURN, F_DISCOUNT, F_MEAN, F_STANCE, F_MAX, F_COST, F_PEAK,
    F_REWARD, F_STEP_MEAN, F_STEP_STANCE, F_STEP_MAX, F_STEP_COST,
) = range(12)  # fmt: skip
N_FLOAT = 12
#: the reward components, in the order of the ``F_*`` sums and ``F_STEP_*`` columns
COMPONENTS = ("mean_distress", "stance", "max_distress", "intervention_cost")
# P[·]: scalar parameters, reward weights and episode settings
(
    P_DYAD_SHARE, P_GROUP_SHARE, P_GROWTH, P_SIDELINE, P_CONTAGION, P_D_NOISE, P_S_NOISE,
    P_SPEAK_ADDRESSED, P_SPEAK_DISTRESS, P_ANSWER, P_W_MEAN, P_BETA, P_LAM, P_COST, P_GAMMA,
    P_SETTLE_THRESHOLD, P_SETTLE_STEPS, P_TERMINATE, P_HORIZON, P_FATIGUE,
    P_HETEROGENEITY, P_REACTIVITY_SD, P_VOLATILITY_SD, P_SUSCEPTIBILITY_SD, P_READING_NOISE,
    P_BASELINE_SD, P_WARMTH_SD,
) = range(27)  # fmt: skip
N_PARAMS = 27
# TR[e, i, ·]: client i's latent traits, drawn at reset (see "Heterogeneous clients" above):
# three multipliers (neutral 1), the baseline offset (neutral 0), then TR[e, i, TR_WARMTH + j]
# the warmth of the dyad i→j (neutral 0; the row has ``cap`` of them)
TR_REACTIVITY, TR_VOLATILITY, TR_SUSCEPTIBILITY, TR_BASELINE, TR_WARMTH = range(5)
#: behaviour codes of a client slot (``BT``): the model decides, or the slot is silent
FREE, SILENT = -2, -1
#: addressee codes (as :data:`rescue_env.dynamics.base.TO_THERAPIST` / ``TO_GROUP``)
TO_THERAPIST, TO_GROUP = -1, -2

_KIND_NEGATIVE, _KIND_POSITIVE = -1, 1

# counter-based random numbers: splitmix64 finaliser over (key, step, draw)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_STEP_MUL = np.uint64(0xD1B54A32D192ED03)
_NEXT_SALT = np.uint64(0x5851F42D4C957F2D)
_S11, _S27, _S30, _S31 = np.uint64(11), np.uint64(27), np.uint64(30), np.uint64(31)
_ONE = np.uint64(1)
#: the "step" of the draws that pick a reset's dialogue and cut row
_RESET_STEP = -1
# draw indices within a step
_U_SECOND, _U_TYPE, _U_ANSWER, _U_PULL, _U_PATTERN = 0, 1, 3, 4, 5  # _U_TYPE + k for turn k
_U_SPEAKER = 8  # + slot
_U_READING = 32  # + 2 slot, + 2 slot + 1: the Box–Muller pair of slot's reading noise
_U_EFFECT = 48  # + 2 slot, + 2 slot + 1: the pair of the move's effect noise on slot (cap <= 8)
_N_STANDARD = 64  # normals use draws 64 + 2k, 65 + 2k (at _RESET_STEP: the client traits)
#: reset draws of the traits (cap <= 8): the three multipliers of slot i at 64 + 6 i .. + 5,
#: the baseline at 112 + 2 i, the warmth of i→j at 128 + 2 (8 i + j) (up to 255)
_U_TRAITS = _N_STANDARD
_U_BASELINE = _U_TRAITS + 6 * 8
_U_WARMTH = _U_BASELINE + 2 * 8
#: draw index of the per-step seed handed to LLM calls (:meth:`Core.step_seed`)
_U_LLM_SEED = 1 << 20


@njit(cache=True)
def mix64(z):
    """splitmix64's finaliser: a bijective hash of a 64-bit word."""
    z = z + _GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(cache=True)
def _bits(key, step, draw):
    return mix64(key ^ mix64(np.uint64(step) * _STEP_MUL + np.uint64(draw)))


@njit(cache=True)
def _uniform(key, step, draw):
    """A uniform in (0, 1] from (key, step, draw)."""
    return float((_bits(key, step, draw) >> _S11) + _ONE) * (1.0 / 9007199254740992.0)


@njit(cache=True, inline="always")
def _normal(key, step, draw):
    """One standard normal from the counter uniforms ``draw`` and ``draw + 1``."""
    u1 = _uniform(key, step, draw)
    u2 = _uniform(key, step, draw + 1)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


@njit(cache=True, inline="always")
def _normals(key, step, count, out):
    """The step's first ``count`` standard normals into ``out`` (Box–Muller: each pair of
    counter uniforms gives two)."""
    for k in range(0, count, 2):
        u1 = _uniform(key, step, _N_STANDARD + k)
        u2 = _uniform(key, step, _N_STANDARD + k + 1)
        r = math.sqrt(-2.0 * math.log(u1))
        out[k] = r * math.cos(2.0 * math.pi * u2)
        if k + 1 < count:
            out[k + 1] = r * math.sin(2.0 * math.pi * u2)


@njit(cache=True)
def next_key(key):
    """The key of the episode after the one keyed ``key``."""
    return mix64(key ^ _NEXT_SALT)


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


@njit(cache=True, inline="always")
def _transition(e, action, S, T, W):
    """The calibrated model moves session ``e`` one step under the therapist's flat action:
    distress, stances, pattern, the step's client turns, and the step's bookkeeping.
    ``W`` is scratch space (:func:`_scratch`)."""
    D, G, I, F, UNT, TURNS, KEY, TS, TT, TA, BT, BA = S[:12]
    TR = S[17]
    (act_intervene, act_target, act_strategy, target_slots, target_valid, P, effect, soften, pressure,
     second_turn, cum_utterance, utterance_kind, utterance_effect, harden, cum_transition, fatigue_pow, effect_sd) = T  # fmt: skip
    cap = D.shape[1]
    n = I[e, I_N]
    p = I[e, I_PATTERN]
    d = D[e]
    g = G[e]
    key = KEY[e]
    step = I[e, I_T]
    n_utterance = cum_utterance.shape[1]
    none = cum_transition.shape[1] - 1
    # -- decode: a target naming an absent member is played as listening, and flagged
    intervene = False
    invalid = False
    s = -1
    target = -1
    if act_intervene[action]:
        target = act_target[action]
        if target_valid[n, target]:
            intervene = True
            s = act_strategy[action]
        else:
            invalid = True
    addressed, keys, inflow, noise = W
    k = 0
    for i in range(cap):
        addressed[i] = intervene and i < n and target_slots[n, target, i]
        if addressed[i]:
            k += 1
    streak = I[e, I_STREAK]
    mult = fatigue_pow[min(streak, fatigue_pow.shape[0] - 1)] if intervene else 0.0
    # -- 1. therapist effect (spread over several people, fading when the therapist keeps talking)
    if intervene:
        share = 1.0 if k == 1 else (P[P_GROUP_SHARE] if k >= n else P[P_DYAD_SHARE])
        worst = 0
        for i in range(1, n):
            if d[i] > d[worst]:
                worst = i
        scale = mult * share
        sd = effect_sd[p, s]
        soft = soften[s] * scale
        for i in range(n):
            if addressed[i]:
                # this move's effect on this client: the (pattern, strategy) cell's mean, spread
                # over the people addressed, and its own per-person spread, fading with the
                # streak like the mean; times the client's reactivity (sign included)
                eff = effect[p, s] * scale + (sd * mult * _normal(key, step, _U_EFFECT + 2 * i) if sd > 0.0 else 0.0)
                d[i] += eff * TR[e, i, TR_REACTIVITY]
                for j in range(n):
                    g[i, j] += soft * (1.0 - g[i, j])
        if not addressed[worst]:
            d[worst] += P[P_SIDELINE]  # the most distressed member feels sidelined
    # -- 2. bucket effect: untended distress feeds on itself; the pattern presses on everyone
    grow = 1.0 + P[P_GROWTH]
    push = pressure[p]
    for i in range(n):
        d[i] = (d[i] if addressed[i] else d[i] * grow) + push
    # -- 3. client turns: who speaks (Gumbel-max over being addressed and distress), what
    # kind of utterance, to whom; all chosen before any takes effect
    n_model = 2 if (n > 1 and _uniform(key, step, _U_SECOND) < second_turn[p]) else 1
    for i in range(n):
        keys[i] = P[P_SPEAK_ADDRESSED] * (1.0 if addressed[i] else 0.0) + P[P_SPEAK_DISTRESS] * d[i] - math.log(
            -math.log(min(_uniform(key, step, _U_SPEAKER + i), 1.0 - 1e-16))
        )
    answer_u = _uniform(key, step, _U_ANSWER)
    n_turns = 0
    # slots the client agents drive speak first, in slot order (PettingZoo view)
    for i in range(n):
        if BT[e, i] >= 0:
            TS[e, n_turns] = i
            TT[e, n_turns] = BT[e, i]
            TA[e, n_turns] = BA[e, i]
            n_turns += 1
    first = -1
    for t_k in range(n_model):
        best = -1
        for i in range(n):  # the highest key; the lowest slot on ties
            if i == first:
                continue
            if best < 0 or keys[i] > keys[best]:
                best = i
        first = best
        slot = best
        if BT[e, slot] != FREE:  # a client agent decides this slot (speaks above, or is silent)
            continue
        cum_u = cum_utterance[p]
        utype = min(_bisect_right(cum_u, _uniform(key, step, _U_TYPE + t_k) * cum_u[n_utterance - 1]), n_utterance - 1)
        addressee = TO_THERAPIST
        if n > 1 and not (addressed[slot] and answer_u < P[P_ANSWER]):
            kind = utterance_kind[utype]
            pick = -1
            for j in range(n):
                if j == slot:
                    continue
                if pick < 0:
                    pick = j
                elif kind == _KIND_NEGATIVE:  # accusations, defences, withdrawals: the worst-regarded
                    if g[slot, j] < g[slot, pick]:
                        pick = j
                elif kind == _KIND_POSITIVE:  # repair, validation: the best-regarded
                    if g[slot, j] > g[slot, pick]:
                        pick = j
                elif abs(g[slot, j]) < abs(g[slot, pick]):  # small talk: the most neutral
                    pick = j
            if kind != 0 or not addressed[slot]:
                addressee = pick
        TS[e, n_turns] = slot
        TT[e, n_turns] = utype
        TA[e, n_turns] = addressee
        n_turns += 1
    for t_k in range(n_turns):
        slot = TS[e, t_k]
        addressee = TA[e, t_k]
        dd = utterance_effect[TT[e, t_k], 0]
        dg = utterance_effect[TT[e, t_k], 1]
        if addressee >= 0 and addressee != slot:
            d[addressee] += dd
            g[addressee, slot] += dg
        elif addressee == TO_GROUP:  # the whole group hears it, at half strength
            for j in range(n):
                if j != slot:
                    d[j] += 0.5 * dd
                    g[j, slot] += 0.5 * dg
    # -- 4. ripple: distress flows from more to less distressed members along hostile edges
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
            d[i] += c * inflow[i] * TR[e, i, TR_SUSCEPTIBILITY]
    # -- 5. stances harden (or warm) with the pattern; noise; clipping
    h = harden[p]
    toward, rate = (-1.0, h) if h >= 0 else (1.0, -h)
    _normals(key, step, n + n * n, noise)
    for i in range(n):
        x = d[i] + P[P_D_NOISE] * TR[e, i, TR_VOLATILITY] * noise[i]
        d[i] = 0.0 if x < 0.0 else (1.0 if x > 1.0 else x)
        for j in range(n):
            if j == i:
                g[i, j] = 0.0
                continue
            # the pattern's pull, the dyad's own warmth (i→j; 0 for the mean dyad), noise
            y = g[i, j] + rate * (toward - g[i, j]) + TR[e, i, TR_WARMTH + j] + P[P_S_NOISE] * noise[n + i * n + j]
            g[i, j] = -1.0 if y < -1.0 else (1.0 if y > 1.0 else y)
    # -- 6. pattern: the move's pull on the transition fades with fatigue, like its effect
    row = 1 + s if (intervene and _uniform(key, step, _U_PULL) < mult) else 0
    cum = cum_transition[row, p]
    I[e, I_PATTERN] = min(_bisect_right(cum, _uniform(key, step, _U_PATTERN) * cum[none]), none)
    # -- 7. bookkeeping of the step
    for i in range(n):
        UNT[e, i] = 0 if addressed[i] else UNT[e, i] + 1
        if not addressed[i]:
            TURNS[e, i] += 1
    if intervene:
        I[e, I_LAST_STRATEGY] = s
        I[e, I_LAST_TARGET] = target
        I[e, I_STREAK] = streak + 1
        I[e, I_INTERVENTIONS] += 1
    else:
        I[e, I_STREAK] = 0
    if n_turns:
        I[e, I_LAST_SPEAKER] = TS[e, n_turns - 1]
    I[e, I_NTURNS] = n_turns
    I[e, I_INTERVENED] = 1 if intervene else 0
    I[e, I_STEP_INVALID] = 1 if invalid else 0
    if invalid:
        I[e, I_INVALID] += 1
    I[e, I_ROW] += (1 if intervene else 0) + n_turns
    I[e, I_T] = step + 1


@njit(cache=True, inline="always")
def write_observation(O, e, D, G, n, pattern, t, streak, UNT, horizon, n_patterns):
    """Write row ``e``'s flat observation into ``O[e]`` from ``D[e]``, ``G[e]``, ``UNT[e]``:
    distress, pattern one-hot, present, stance, tempo, untended (gymnasium's ``flatten`` of
    the ``Dict`` observation, keys sorted). Rows are indexed, not sliced: no array views."""
    cap = D.shape[1]
    for i in range(cap):
        O[e, i] = D[e, i]
    off = cap
    for q in range(n_patterns + 1):
        O[e, off + q] = 1.0 if q == pattern else 0.0
    off += n_patterns + 1
    for i in range(cap):
        O[e, off + i] = 1.0 if i < n else 0.0
    off += cap
    for i in range(cap):
        for j in range(cap):
            O[e, off + i * cap + j] = G[e, i, j]
    off += cap * cap
    O[e, off] = t / horizon if t < horizon else 1.0
    O[e, off + 1] = streak / 3.0 if streak < 3 else 1.0
    off += 2
    for i in range(cap):
        x = UNT[e, i]
        O[e, off + i] = (0.1 * x if x < 10 else 1.0) if i < n else 0.0


@njit(cache=True)
def _scratch(cap):
    """Scratch arrays of one transition (allocated once per kernel call, not per session)."""
    return (np.zeros(cap, np.bool_), np.zeros(cap), np.zeros(cap), np.zeros(cap + cap * cap + 1))


@njit(cache=True, inline="always")
def _observe(e, S, P, n_patterns):
    """Write session ``e``'s flat observation into its row of ``obs``."""
    I = S[2]
    O = S[12]
    write_observation(O, e, S[0], S[1], I[e, I_N], I[e, I_PATTERN], I[e, I_T], I[e, I_STREAK], S[4], P[P_HORIZON], n_patterns)
    # the observation model: what is seen is a noisy reading of latent distress (σ* uses
    # the latent state); a volatile client's reading swings more. A start state is the seed
    # dialogue's own annotation (already a reading, moved by the drawn clients' baseline): it
    # is shown as it is.
    sd = P[P_READING_NOISE]
    if sd > 0.0 and I[e, I_T] > 0:
        key, step, TR = S[6][e], I[e, I_T], S[17]
        for i in range(I[e, I_N]):
            x = S[0][e, i] + sd * TR[e, i, TR_VOLATILITY] * _normal(key, step, _U_READING + 2 * i)
            O[e, i] = 0.0 if x < 0.0 else (1.0 if x > 1.0 else x)


@njit(cache=True, inline="always")
def _finish(e, S, P, n_patterns):
    """σ* of the state session ``e`` reached, the episode book, episode end, observation."""
    D, G, I, F = S[0], S[1], S[2], S[3]
    REW, TERM, TRUNC = S[13], S[14], S[15]
    n = I[e, I_N]
    d = D[e]
    g = G[e]
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
    c_cost = -P[P_COST] * float(I[e, I_INTERVENED])
    reward = c_mean + c_stance + c_max + c_cost
    F[e, F_RETURN] += F[e, F_DISCOUNT] * reward
    F[e, F_DISCOUNT] *= P[P_GAMMA]
    F[e, F_MEAN] += c_mean
    F[e, F_STANCE] += c_stance
    F[e, F_MAX] += c_max
    F[e, F_COST] += c_cost
    F[e, F_REWARD] = reward
    F[e, F_STEP_MEAN] = c_mean
    F[e, F_STEP_STANCE] = c_stance
    F[e, F_STEP_MAX] = c_max
    F[e, F_STEP_COST] = c_cost
    if max_d > F[e, F_PEAK]:
        F[e, F_PEAK] = max_d
    settled = I[e, I_SETTLED] + 1 if max_d < P[P_SETTLE_THRESHOLD] else 0
    I[e, I_SETTLED] = settled
    term = P[P_TERMINATE] != 0.0 and settled >= P[P_SETTLE_STEPS]
    trunc = (not term) and I[e, I_T] >= P[P_HORIZON]
    TERM[e] = term
    TRUNC[e] = trunc
    I[e, I_DONE] = TERMINATED if term else (TRUNCATED if trunc else RUNNING)
    REW[e] = reward
    _observe(e, S, P, n_patterns)


@njit(cache=True, inline="always")
def _draw_traits(e, S, P):
    """Draw session ``e``'s clients' latent traits and dyads' warmth from its episode key
    (reset draws, the normals' indices ``_U_TRAITS`` / ``_U_BASELINE`` / ``_U_WARMTH``; the
    dialogue and cut use draws 0 and 1). ``heterogeneity`` 0 gives every client the mean
    client's traits (multipliers 1, baseline offset and warmth 0). The baseline offset moves a
    reset's start distress (:func:`_begin`), not a loaded state (:meth:`Core.load`: a real
    person's observed state already holds their baseline)."""
    TR = S[17]
    key = S[6][e]
    h = P[P_HETEROGENEITY]
    cap = TR.shape[1]
    for i in range(cap):
        base = _U_TRAITS + 6 * i
        TR[e, i, TR_REACTIVITY] = 1.0 + h * P[P_REACTIVITY_SD] * _normal(key, _RESET_STEP, base)
        TR[e, i, TR_VOLATILITY] = math.exp(h * P[P_VOLATILITY_SD] * _normal(key, _RESET_STEP, base + 2))
        TR[e, i, TR_SUSCEPTIBILITY] = math.exp(h * P[P_SUSCEPTIBILITY_SD] * _normal(key, _RESET_STEP, base + 4))
        sd = h * P[P_BASELINE_SD]
        TR[e, i, TR_BASELINE] = sd * _normal(key, _RESET_STEP, _U_BASELINE + 2 * i) if sd > 0.0 else 0.0
        sd = h * P[P_WARMTH_SD]
        for j in range(cap):
            w = 0.0
            if sd > 0.0 and j != i:
                w = sd * _normal(key, _RESET_STEP, _U_WARMTH + 2 * (8 * i + j))
            TR[e, i, TR_WARMTH + j] = w


@njit(cache=True)
def _load_kernel(e, S, P, n_patterns):
    """Traits and observation of a session whose state was put in by :meth:`Core.load`."""
    _draw_traits(e, S, P)
    _observe(e, S, P, n_patterns)


@njit(cache=True, inline="always")
def _begin(e, start, S, P, ST, n_patterns):
    """Start session ``e`` from row ``start`` of the start table (its key is already set);
    the step outputs (reward, flags) are left to the caller."""
    D, G, I, F, UNT, TURNS = S[0], S[1], S[2], S[3], S[4], S[5]
    start_n, start_D, start_G, start_P, start_UNT, start_row = ST[0], ST[1], ST[2], ST[3], ST[4], ST[5]
    n = start_n[start]
    D[e, :] = start_D[start]
    G[e, :, :] = start_G[start]
    UNT[e, :] = start_UNT[start]
    TURNS[e, :] = 0
    I[e, :] = 0
    I[e, I_N] = n
    I[e, I_PATTERN] = start_P[start]
    I[e, I_ROW] = start_row[start]
    I[e, I_LAST_SPEAKER] = KEEP
    I[e, I_LAST_STRATEGY] = KEEP
    I[e, I_LAST_TARGET] = KEEP
    I[e, I_START] = start
    F[e, :] = 0.0
    F[e, F_DISCOUNT] = 1.0
    _draw_traits(e, S, P)
    # the drawn client's baseline: their distress sits above or below the seed person's
    TR = S[17]
    for i in range(n):
        x = D[e, i] + TR[e, i, TR_BASELINE]
        D[e, i] = 0.0 if x < 0.0 else (1.0 if x > 1.0 else x)
    peak = D[e, 0]
    for i in range(n):
        if D[e, i] > peak:
            peak = D[e, i]
    F[e, F_PEAK] = peak
    _observe(e, S, P, n_patterns)


@njit(cache=True, inline="always")
def _draw_start(key, dialogue, row, ST):
    """The start-table row of a reset: the dialogue (``-1``: drawn uniformly) cut at ``row``
    (``-1``: drawn uniformly from the dialogue's ``min_prefix`` to its last row)."""
    first, count, low = ST[6], ST[7], ST[8]
    if dialogue < 0:
        dialogue = min(int(_uniform(key, _RESET_STEP, 0) * first.shape[0]), first.shape[0] - 1)
    n_rows = count[dialogue] - 1
    if row < 0:
        lo = low[dialogue]
        row = lo + min(int(_uniform(key, _RESET_STEP, 1) * (n_rows - lo)), n_rows - lo - 1) if n_rows > 1 else 0
    return first[dialogue] + row


@njit(cache=True, inline="always")
def _restart(e, S, P, ST, n_patterns):
    """Start the next episode of session ``e`` (key chained, dialogue and cut drawn)."""
    S[6][e] = next_key(S[6][e])
    _begin(e, _draw_start(S[6][e], -1, -1, ST), S, P, ST, n_patterns)


@njit(cache=True)
def _reset_kernel(idx, dialogues, rows, S, P, ST, n_patterns):
    for k in range(idx.shape[0]):
        e = idx[k]
        _begin(e, _draw_start(S[6][e], dialogues[k], rows[k], ST), S, P, ST, n_patterns)
        S[13][e] = 0.0
        S[14][e] = False
        S[15][e] = False


#: autoreset modes of :func:`_step_kernel`
NO_AUTORESET, SAME_STEP, NEXT_STEP = 0, 1, 2


@njit(cache=True)
def _step_kernel(actions, S, T, ST, n_patterns, mode, X):
    """Step every session. ``mode``: :data:`NO_AUTORESET`; :data:`SAME_STEP` (SB3: a session
    whose episode ends starts the next one in the same call, its final observation, floats,
    integers and untended turns copied to ``X`` first); :data:`NEXT_STEP` (gymnasium ≥ 1.0: a
    session whose episode ended at the previous call starts the next one instead of stepping,
    with reward 0)."""
    P = T[5]
    I = S[2]
    W = _scratch(S[0].shape[1])
    for e in range(actions.shape[0]):
        if mode == NEXT_STEP and I[e, I_DONE] != RUNNING:
            _restart(e, S, P, ST, n_patterns)
            S[13][e] = 0.0
            S[14][e] = False
            S[15][e] = False
            continue
        _transition(e, actions[e], S, T, W)
        _finish(e, S, P, n_patterns)
        if mode == SAME_STEP and I[e, I_DONE] != RUNNING:
            X[0][e, :] = S[12][e]
            X[1][e, :] = S[3][e]
            X[2][e, :] = I[e]
            X[3][e, :] = S[5][e]
            X[4][e, :] = S[0][e]
            _restart(e, S, P, ST, n_patterns)


@njit(cache=True)
def _transition_kernel(actions, S, T):
    W = _scratch(S[0].shape[1])
    for e in range(actions.shape[0]):
        _transition(e, actions[e], S, T, W)


@njit(cache=True)
def _finish_kernel(S, P, n_patterns):
    for e in range(S[0].shape[0]):
        _finish(e, S, P, n_patterns)


# ------------------------------------------------------------------------------------------
# Python side: tables, start states, the Core object


class StartTable:
    """The start states of every (seed dialogue, cut row): the state after the dialogue's
    first ``k`` rows for every ``k`` from 0 to its length, computed once (one pass per
    dialogue) and stored as arrays for the core's resets.

    Args:
        dialogues: the seed dialogues (one scenario).
        patterns: the scenario's patterns (their order indexes the pattern column).
        cap: the group-size cap (a larger group is an error: the envs check first, see
            :func:`rescue_env.data.check_group_sizes`).
        min_prefix: fewest seed rows before a drawn cut.
    """

    def __init__(self, dialogues: Sequence[Dialogue], patterns: Sequence[str], cap: int, min_prefix: int):
        if not dialogues:
            raise ValueError("no seed dialogue to start episodes from")
        self.dialogues = list(dialogues)
        self.members: list[tuple[str, ...]] = []
        #: per start: (dialogue index, cut row) and the state snapshot (emotions, last moves)
        self.origin: list[tuple[int, int]] = []
        self.snapshots: list[GroupState] = []
        n_starts = sum(len(d.rows) + 1 for d in self.dialogues)
        self.n = np.zeros(n_starts, np.int64)
        self.D = np.zeros((n_starts, cap))
        self.G = np.zeros((n_starts, cap, cap))
        self.P = np.zeros(n_starts, np.int64)
        self.UNT = np.zeros((n_starts, cap), np.int64)
        self.row = np.zeros(n_starts, np.int64)
        self.first = np.zeros(len(self.dialogues), np.int64)
        self.count = np.zeros(len(self.dialogues), np.int64)
        self.low = np.zeros(len(self.dialogues), np.int64)
        index = {p: i for i, p in enumerate(patterns)}
        s = 0
        for k, dialogue in enumerate(self.dialogues):
            members = tuple(dialogue.participants)
            if not 1 <= len(members) <= cap:
                raise ValueError(f"dialogue {dialogue.sample_id!r} has {len(members)} participants; the env holds 1..{cap} (env.max_members)")
            self.members.append(members)
            self.first[k] = s
            self.count[k] = len(dialogue.rows) + 1
            self.low[k] = min(min_prefix, max(len(dialogue.rows) - 1, 0))
            tracker = StateTracker(dialogue.scenario, members)
            for cut in range(len(dialogue.rows) + 1):
                if cut:
                    tracker.update(dialogue.rows[cut - 1])
                st = tracker.state.copy()
                n = st.n
                self.n[s], self.P[s], self.row[s] = n, index.get(st.pattern, len(index)) if st.pattern else len(index), st.row_index
                self.D[s, :n] = st.distress
                self.G[s, :n, :n] = st.stance
                self.UNT[s, :n] = st.untended
                self.origin.append((k, cut))
                self.snapshots.append(st)
                s += 1

    def arrays(self) -> tuple:
        return (self.n, self.D, self.G, self.P, self.UNT, self.row, self.first, self.count, self.low)

    def index_of(self, sample_id: str) -> int:
        """The dialogue index of ``sample_id`` (``ValueError`` naming the choices if absent)."""
        for k, d in enumerate(self.dialogues):
            if d.sample_id == sample_id:
                return k
        raise ValueError(f"no seed dialogue {sample_id!r}; have {[d.sample_id for d in self.dialogues]}")


#: fatigue ** streak for streaks up to this length (longer streaks use the last value, ~0)
_MAX_STREAK = 64


class Core:
    """The state of ``num_sessions`` sessions and the compiled model that moves them.

    Args:
        params: the calibrated parameters of the scenario.
        encoding: the therapist's action encoding (its cap pads the arrays).
        reward: σ*'s weights (:meth:`set_reward` changes them live).
        starts: the start states of the seed dialogues (``None``: sessions are only ever
            :meth:`load`-ed, e.g. to simulate moves from real states).
        num_sessions: N.
        horizon, settle_threshold, settle_steps, terminate_on_settle: episode end
            (:class:`~rescue_env.config.EnvConfig`).

    Adapters call :meth:`reset`, then :meth:`step` (or :meth:`transition`, a change of the
    state through :meth:`set_state`, and :meth:`finish`), and read the arrays: ``obs``
    (float32, ``(N, obs_dim)``), ``rewards``, ``terminated``, ``truncated``, :meth:`masks`.
    """

    def __init__(
        self,
        params: ScenarioParams,
        encoding: ActionEncoding,
        reward: RewardConfig,
        starts: StartTable | None,
        num_sessions: int,
        *,
        horizon: int,
        settle_threshold: float,
        settle_steps: int,
        terminate_on_settle: bool,
        heterogeneity: float = 1.0,
    ):
        self.params = params
        self.encoding = encoding
        self.starts = starts
        self.num_sessions = N = int(num_sessions)
        cap = self.cap = encoding.max_members
        if cap > (_N_STANDARD - _U_EFFECT) // 2:
            # the per-slot draw indices (reading and effect noise) would run into the normals'
            raise ValueError(f"the core holds groups of at most {(_N_STANDARD - _U_EFFECT) // 2}, the encoding asks for {cap}")
        self.patterns = tuple(params.patterns)
        self.n_patterns = len(self.patterns)
        A = encoding.n_actions
        act_intervene = np.zeros(A, np.bool_)
        act_target = np.zeros(A, np.int64)
        act_strategy = np.zeros(A, np.int64)
        for a in range(1, A):
            dec = encoding.decode(a)
            act_intervene[a], act_target[a], act_strategy[a] = True, dec.target, dec.strategy
        T_ = encoding.n_targets
        target_slots = np.zeros((cap + 1, T_, cap), np.bool_)
        target_valid = np.zeros((cap + 1, T_), np.bool_)
        self.mask_table = np.zeros((cap + 1, A), np.bool_)
        #: member slots of each target option, by group size
        self._slots = [[() if n == 0 else encoding.target_slots(t, n) for n in range(cap + 1)] for t in range(encoding.n_targets)]
        self.factored_tables: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for n in range(1, cap + 1):
            target_valid[n] = encoding.target_mask(n).astype(bool)
            for t in range(T_):
                for i in encoding.target_slots(t, n):
                    target_slots[n, t, i] = True
            self.mask_table[n] = encoding.mask(n).astype(bool)
            self.factored_tables[n] = encoding.factored_mask(n)
        #: the masks as ``int8`` (what infos carry, for ``Discrete.sample(mask=)``)
        self.mask_table_int8 = self.mask_table.astype(np.int8)
        self.P = np.zeros(N_PARAMS)
        sp = params
        P = self.P
        P[P_DYAD_SHARE], P[P_GROUP_SHARE] = sp.dyad_share, sp.group_share
        P[P_GROWTH], P[P_SIDELINE], P[P_CONTAGION] = sp.untended_growth, sp.sideline_penalty, sp.contagion
        P[P_D_NOISE], P[P_S_NOISE] = sp.distress_noise, sp.stance_noise
        P[P_SPEAK_ADDRESSED], P[P_SPEAK_DISTRESS], P[P_ANSWER] = sp.speak_addressed, sp.speak_distress, sp.answer_therapist
        P[P_FATIGUE] = sp.fatigue
        P[P_REACTIVITY_SD], P[P_VOLATILITY_SD], P[P_SUSCEPTIBILITY_SD] = sp.reactivity_sd, sp.volatility_sd, sp.susceptibility_sd
        P[P_READING_NOISE] = sp.reading_noise
        P[P_BASELINE_SD], P[P_WARMTH_SD] = sp.baseline_sd, sp.warmth_sd
        self.set_heterogeneity(heterogeneity)
        self.set_reward(reward)
        self.set_episode_end(horizon=horizon, settle_threshold=settle_threshold, settle_steps=settle_steps, terminate_on_settle=terminate_on_settle)
        kinds = np.zeros(len(UTTERANCE_TYPES), np.int64)
        for name in ("accusation", "defense", "withdrawal"):
            kinds[UTTERANCE_TYPES.index(name)] = _KIND_NEGATIVE
        for name in ("repair", "validation"):
            kinds[UTTERANCE_TYPES.index(name)] = _KIND_POSITIVE
        f64 = lambda x: np.ascontiguousarray(x, np.float64)  # noqa: E731
        self.T = (
            act_intervene, act_target, act_strategy, target_slots, target_valid, P,
            f64(sp.effect), f64(sp.soften), f64(sp.pattern_pressure), f64(sp.second_turn),
            f64(np.cumsum(sp.utterance, axis=1)), kinds, f64(sp.utterance_effect), f64(sp.harden),
            f64(np.cumsum(sp.transition, axis=2)), np.array([sp.fatigue**k for k in range(_MAX_STREAK)]), f64(sp.effect_sd),
        )  # fmt: skip
        if starts is not None:
            self.ST = starts.arrays()
        else:  # nothing to reset from: empty tables keep the kernels' signatures
            z = np.zeros(1, np.int64)
            self.ST = (z, np.zeros((1, cap)), np.zeros((1, cap, cap)), z, np.zeros((1, cap), np.int64), z, z, z, z)
        self.D = np.zeros((N, cap))
        self.G = np.zeros((N, cap, cap))
        self.I = np.zeros((N, N_INT), np.int64)
        self.F = np.zeros((N, N_FLOAT))
        self.UNT = np.zeros((N, cap), np.int64)
        self.TURNS = np.zeros((N, cap), np.int64)
        self.KEY = np.zeros(N, np.uint64)
        self.TR = np.ones((N, cap, TR_WARMTH + cap))
        self.TR[:, :, TR_BASELINE:] = 0.0
        max_turns = cap + 2
        self.TS = np.zeros((N, max_turns), np.int64)
        self.TT = np.zeros((N, max_turns), np.int64)
        self.TA = np.zeros((N, max_turns), np.int64)
        self.BT = np.full((N, cap), FREE, np.int64)
        self.BA = np.zeros((N, cap), np.int64)
        self.obs_dim = cap + self.n_patterns + 1 + cap + cap * cap + 2 + cap
        self.obs = np.zeros((N, self.obs_dim), np.float32)
        self.rewards = np.zeros(N)
        self.terminated = np.zeros(N, np.bool_)
        self.truncated = np.zeros(N, np.bool_)
        self.final_obs = np.zeros((N, self.obs_dim), np.float32)
        self.S = (
            self.D, self.G, self.I, self.F, self.UNT, self.TURNS, self.KEY, self.TS, self.TT, self.TA,
            self.BT, self.BA, self.obs, self.rewards, self.terminated, self.truncated, self.final_obs, self.TR,
        )  # fmt: skip
        #: the final observation, floats, integers, untended turns and distress of episodes that
        #: ended in a SAME_STEP call
        self.X = (self.final_obs, np.zeros_like(self.F), np.zeros_like(self.I), np.zeros_like(self.TURNS), np.zeros_like(self.D))

    # settings ---------------------------------------------------------------------------------
    def set_reward(self, reward: RewardConfig) -> None:
        """Use ``reward``'s weights from the next step on."""
        if not isinstance(reward, RewardConfig):
            raise TypeError(f"reward_cfg must be a RewardConfig, got {type(reward).__name__}")
        P = self.P
        P[P_W_MEAN], P[P_BETA], P[P_LAM], P[P_COST], P[P_GAMMA] = reward.w_mean, reward.beta, reward.lam, reward.cost, reward.gamma
        self.reward = reward

    def set_heterogeneity(self, heterogeneity: float) -> None:
        """Spread of the clients drawn at the next resets: 0 = every client is the mean
        client, 1 = the fitted population spread, > 1 wider (domain randomisation)."""
        h = float(heterogeneity)
        if not (h >= 0.0 and math.isfinite(h)):
            raise ValueError(f"dynamics.heterogeneity must be a finite number >= 0, got {heterogeneity!r}")
        self.P[P_HETEROGENEITY] = self.heterogeneity = h

    def set_reading_noise(self, sd: float) -> None:
        """The observation model's reading noise (sd around latent distress; 0: the policy sees
        the latent distress). Client models that report their own emotions (LLM clients: their
        self-report is the reading) switch it off."""
        self.P[P_READING_NOISE] = float(sd)

    def traits(self, e: int) -> dict[str, np.ndarray]:
        """Session ``e``'s clients' latent traits (per member slot): ``reactivity``,
        ``volatility``, ``susceptibility`` (multipliers, 1 for the mean client), ``baseline``
        (offset of their distress from the seed person's at reset, 0 for the mean client) and
        ``warmth`` (``[n, n]``: row i, column j the per-step stance drift of i toward j, 0 for
        the mean dyad)."""
        n = int(self.I[e, I_N])
        out = {name: self.TR[e, :n, k].copy() for k, name in enumerate(("reactivity", "volatility", "susceptibility", "baseline"))}
        out["warmth"] = self.TR[e, :n, TR_WARMTH : TR_WARMTH + n].copy()
        return out

    def set_episode_end(self, *, horizon: int, settle_threshold: float, settle_steps: int, terminate_on_settle: bool) -> None:
        """Use these episode-end settings from the next step on."""
        P = self.P
        P[P_HORIZON], P[P_SETTLE_THRESHOLD], P[P_SETTLE_STEPS], P[P_TERMINATE] = horizon, settle_threshold, settle_steps, float(terminate_on_settle)

    # episodes ---------------------------------------------------------------------------------
    def reset(self, idx: Sequence[int] | np.ndarray, keys: Sequence[int] | np.ndarray, dialogues: Sequence[int] | None = None, rows: Sequence[int] | None = None) -> None:
        """Start new episodes of sessions ``idx`` with episode ``keys``; ``dialogues`` /
        ``rows`` fix a session's seed dialogue (index) / cut row (``-1``: drawn)."""
        idx = np.asarray(idx, np.int64)
        self.KEY[idx] = np.asarray(keys, np.uint64)
        dl = np.full(len(idx), -1, np.int64) if dialogues is None else np.asarray(dialogues, np.int64)
        rw = np.full(len(idx), -1, np.int64) if rows is None else np.asarray(rows, np.int64)
        for k in range(len(idx)):
            if rw[k] >= 0 and dl[k] >= 0 and rw[k] > self.starts.count[dl[k]] - 1:
                d = self.starts.dialogues[dl[k]]
                raise ValueError(f"start_row={rw[k]} outside 0..{len(d.rows)} for {d.sample_id!r}")
        _reset_kernel(idx, dl, rw, self.S, self.P, self.ST, self.n_patterns)

    def step(self, actions: np.ndarray, mode: int = NO_AUTORESET) -> None:
        """Step every session with ``actions`` (``int64[N]``, checked by the caller); see
        :func:`_step_kernel` for ``mode``."""
        _step_kernel(actions, self.S, self.T, self.ST, self.n_patterns, mode, self.X)

    def transition(self, actions: np.ndarray) -> None:
        """The calibrated transition only (then :meth:`finish`): for client models that
        change the state it reached (LLM clients) before σ* is booked. ``BT``/``BA`` fix
        client agents' turns (``FREE`` / ``SILENT`` / an utterance type and addressee)."""
        _transition_kernel(actions, self.S, self.T)

    def finish(self) -> None:
        """σ*, the book, episode end and observations of the state every session reached."""
        _finish_kernel(self.S, self.P, self.n_patterns)

    def set_state(self, e: int, *, distress: np.ndarray | None = None, stance: np.ndarray | None = None, pattern: str | None | int = -1) -> None:
        """Overwrite session ``e``'s distress (clipped to [0, 1]), stances (clipped to
        [−1, 1], diagonal 0) and/or pattern (a label or ``None``; ``-1``: unchanged)."""
        n = int(self.I[e, I_N])
        if distress is not None:
            self.D[e, :n] = np.clip(distress, 0.0, 1.0)
        if stance is not None:
            g = np.clip(np.asarray(stance, float), -1.0, 1.0)
            np.fill_diagonal(g, 0.0)
            self.G[e, :n, :n] = g
        if pattern != -1:
            self.I[e, I_PATTERN] = self.params.pattern_index(pattern)  # type: ignore[arg-type]

    def set_turns(self, e: int, turns: Sequence[tuple[int, int, int]]) -> None:
        """Replace session ``e``'s client turns of the step (slot, utterance type, addressee),
        e.g. with the ones LLM clients took; the row count and last speaker follow."""
        k = int(self.I[e, I_NTURNS])
        self.I[e, I_ROW] += len(turns) - k
        for j, (slot, utype, addressee) in enumerate(turns):
            self.TS[e, j], self.TT[e, j], self.TA[e, j] = slot, utype, addressee
        self.I[e, I_NTURNS] = len(turns)
        if turns:
            self.I[e, I_LAST_SPEAKER] = turns[-1][0]

    def load(self, e: int, state: GroupState, *, key: int, streak: int = 0) -> None:
        """Put an arbitrary state (e.g. one extracted from a real dialogue) in session ``e``
        with episode key ``key`` (its clients' traits are drawn from the key): the fidelity
        check simulates moves from real states."""
        n = state.n
        if not 1 <= n <= self.cap:
            raise ValueError(f"a group of {n} does not fit the cap {self.cap}")
        self.D[e] = 0.0
        self.D[e, :n] = state.distress
        self.G[e] = 0.0
        self.G[e, :n, :n] = state.stance
        self.UNT[e] = 0
        self.UNT[e, :n] = state.untended
        self.TURNS[e] = 0
        self.I[e] = 0
        self.I[e, I_N], self.I[e, I_PATTERN], self.I[e, I_STREAK] = n, self.params.pattern_index(state.pattern), streak
        self.I[e, I_LAST_SPEAKER] = self.I[e, I_LAST_STRATEGY] = self.I[e, I_LAST_TARGET] = KEEP
        self.F[e] = 0.0
        self.F[e, F_DISCOUNT] = 1.0
        self.KEY[e] = np.uint64(key)
        self.rewards[e] = 0.0
        self.terminated[e] = self.truncated[e] = False
        _load_kernel(e, self.S, self.P, self.n_patterns)

    def step_seed(self, e: int) -> int:
        """A 31-bit seed for session ``e``'s current step drawn from its key (LLM calls)."""
        return int(_bits(self.KEY[e], int(self.I[e, I_T]), _U_LLM_SEED)) % (2**31 - 1)

    # views --------------------------------------------------------------------------------------
    def masks(self) -> np.ndarray:
        """``(N, n_actions)`` boolean masks of the sessions' current groups."""
        return self.mask_table[self.I[:, I_N]]

    def turns(self, e: int) -> list[tuple[int, int, int]]:
        """Session ``e``'s client turns of the last step: (slot, utterance type, addressee)."""
        k = int(self.I[e, I_NTURNS])
        return list(zip(self.TS[e, :k].tolist(), self.TT[e, :k].tolist(), self.TA[e, :k].tolist()))

    def pattern_of(self, e: int) -> str | None:
        p = int(self.I[e, I_PATTERN])
        return self.patterns[p] if p < self.n_patterns else None

    def step_components(self, e: int) -> dict[str, float]:
        """The last step's weighted σ* components of session ``e`` (they sum to its reward)."""
        f = self.F[e]
        return dict(zip(COMPONENTS, (float(f[F_STEP_MEAN]), float(f[F_STEP_STANCE]), float(f[F_STEP_MAX]), float(f[F_STEP_COST]))))

    def stats(self, e: int, *, final: bool = False) -> dict[str, Any]:
        """Session ``e``'s episode figures (``final``: of the episode that ended at the last
        :data:`SAME_STEP` call, whose session has already restarted)."""
        F, I, TURNS = (self.X[1], self.X[2], self.X[3]) if final else (self.F, self.I, self.TURNS)
        f, i = F[e], I[e]
        n = int(i[I_N])
        k, cut = self.starts.origin[int(i[I_START])]
        members = self.starts.members[k]
        d = (self.X[4] if final else self.D)[e, :n]
        out: dict[str, Any] = {
            "steps": int(i[I_T]),
            "sigma_return": float(f[F_RETURN]),
            "sigma": dict(zip(COMPONENTS, (float(f[F_MEAN]), float(f[F_STANCE]), float(f[F_MAX]), float(f[F_COST])))),
        }
        out["final_max_distress"] = float(d.max())
        out["final_mean_distress"] = float(d.sum() / n)
        out.update(
            peak_max_distress=float(f[F_PEAK]),
            untended_turns={m: int(x) for m, x in zip(members, TURNS[e, :n].tolist())},
            interventions=int(i[I_INTERVENTIONS]),
            invalid_actions=int(i[I_INVALID]),
            seed_dialogue=self.starts.dialogues[k].sample_id,
            start_row=cut,
        )
        return out

    def start_of(self, e: int) -> tuple[Dialogue, int, tuple[str, ...], GroupState]:
        """Session ``e``'s seed dialogue, cut row, members and start-state snapshot."""
        s = int(self.I[e, I_START])
        k, cut = self.starts.origin[s]
        return self.starts.dialogues[k], cut, self.starts.members[k], self.starts.snapshots[s]

    def state_view(self, e: int, prev: GroupState) -> GroupState:
        """A new :class:`GroupState` of session ``e``'s live numbers; what the core does not
        hold (emotion words, intensities) is carried over from ``prev``."""
        st = object.__new__(GroupState)
        st.__dict__.update(prev.__dict__)
        st.emotion = list(prev.emotion)
        st.intensity = prev.intensity.copy()
        self.write_state(e, st)
        return st

    def write_state(self, e: int, st: GroupState) -> None:
        """Copy session ``e``'s live numbers into the :class:`GroupState` view ``st``."""
        n = st.n
        i = self.I[e]
        st.distress = self.D[e, :n].copy()
        st.stance = self.G[e, :n, :n].copy()
        st.untended = self.UNT[e, :n].copy()
        st.pattern = self.pattern_of(e)
        if i[I_T]:
            st.row_index = int(i[I_ROW])
        if i[I_LAST_SPEAKER] != KEEP:
            st.last_speaker = st.members[int(i[I_LAST_SPEAKER])]
        if i[I_LAST_STRATEGY] != KEEP:
            st.last_strategy = self.encoding.strategy_names[int(i[I_LAST_STRATEGY])]
            st.last_target = tuple(st.members[j] for j in self._slots[int(i[I_LAST_TARGET])][n])

