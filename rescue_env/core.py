"""The simulator core: the state of N sessions as arrays and every number the model moves.

Everything numeric is here, once, compiled with numba and batched over sessions:

* the calibrated client model's transition (:func:`_transition`), one helper per part of the
  model stated in :mod:`rescue_env.dynamics.calibrated`: therapist effect, bucket effect,
  client turns, ripple, stance drift and noise, pattern transition, bookkeeping;
* σ* and the episode book (:func:`_sigma_star`, the reward of :mod:`rescue_env.reward`):
  discounted return, weighted components, peaks, settling, termination and truncation;
* the client population (per-client traits drawn at each reset, :func:`_draw_traits`) and
  the observation model (the distress the policy sees is a noisy reading of latent distress,
  :func:`_observe`; the flat layout is gymnasium's ``flatten`` of the envs' ``Dict``
  observation) and the action masks (a table per group size);
* resets from start states computed once per seed dialogue and cut row when the data is
  loaded (:class:`StartTable`): a fresh episode (:func:`_begin`, for a reset and for a state
  put in with :meth:`Core.load` alike) copies a row of the table, it never replays rows.

The numbers live in named structures (:class:`State`, :class:`Tables`, :class:`Starts`,
:class:`Final`: ``NamedTuple`` s of arrays, row ``e`` of each per-session array is session
``e``; groups padded to the cap). The kernels read them by name (``S.distress[e]``). One
compiled entry point (:func:`_kernel`) runs every task, so numba compiles each helper once.

Randomness is counter-based: every draw is a hash (splitmix64) of the session's episode key,
the step number and the draw's index, so a session's episode depends on its key only —
not on N, on its place in the batch, or on what other sessions do. An episode's key comes
from the env's seeded generator at ``reset(seed=...)``; the next episode's key (a reset
without a seed, or an auto-reset) is the hash of the previous one. Normals are Box–Muller
pairs of such uniforms.

The envs (:mod:`rescue_env.envs`) are thin adapters over :class:`Core`'s public methods: the
Gymnasium env is a core with N = 1, the vector envs a core with N sessions, the PettingZoo
env N = 1 with client agents' behaviours (:meth:`Core.set_behaviours`). LLM client dynamics
run :meth:`Core.transition` (who speaks, the calibrated drift of the silent members, the
pattern draw), overwrite the speakers' distress and stances (and the pattern) with
:meth:`Core.set_state`, then :meth:`Core.finish`.
"""

from __future__ import annotations

import functools
import math
import os
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator, NamedTuple, Sequence

import numba
import numpy as np
from numba import njit

from rescue_env.config import check_heterogeneity
from rescue_env.data.schema import GROUP_LABELS, THERAPIST, Dialogue
from rescue_env.dynamics.params import ScenarioParams
from rescue_env.reward import RewardConfig
from rescue_env.state import GroupState, StateTracker
from rescue_env.taxonomy.actions import ActionEncoding
from rescue_env.taxonomy.labels import UTTERANCE_TYPES, strategies


class _CompileNotice:
    """Says on stderr, once per process, that numba is compiling, when a block it guards keeps
    the process busy longer than loading a warm cache does (a fresh install's first run).
    CPU time, not wall time, decides: a loaded machine slows a warm load but does not make
    it busy."""

    CPU_S = 3.0
    printed = False

    def __enter__(self) -> _CompileNotice:
        self._done = threading.Event()
        self._cpu0 = time.process_time()
        threading.Thread(target=self._watch, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()

    def _watch(self) -> None:
        while not self._done.wait(0.5):
            if time.process_time() - self._cpu0 >= self.CPU_S and not _CompileNotice.printed:
                _CompileNotice.printed = True
                print("rescue_env: compiling the simulator (first run only, ~20 s; cached after)", file=sys.stderr, flush=True)
                return


def _ensure_writable_cache() -> None:
    """Where numba keeps the compiled kernels: beside this file (an editable install), else its
    own fallback, the user's cache directory (a read-only install); where neither is
    writable (a read-only install and home) a per-user temporary directory, rather than an
    import that fails. ``NUMBA_CACHE_DIR`` set by the user wins."""
    if numba.config.CACHE_DIR:
        return
    here = os.path.dirname(os.path.abspath(__file__))
    user = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for path in (os.path.join(here, "__pycache__"), here, user):
        if os.path.isdir(path) and os.access(path, os.W_OK):
            return
    numba.config.CACHE_DIR = os.path.join(tempfile.gettempdir(), f"rescue_env-numba-{os.getuid() if hasattr(os, 'getuid') else 'user'}")


_ensure_writable_cache()
_import_notice = _CompileNotice().__enter__()


class State(NamedTuple):
    """The live state of N sessions (row ``e``: session ``e``; ``cap``: the group-size cap)."""

    # the group
    n: np.ndarray  #: int64[N] members
    distress: np.ndarray  #: float64[N, cap] latent distress (padding 0)
    stance: np.ndarray  #: float64[N, cap, cap] stance of i toward j (diagonal and padding 0)
    pattern: np.ndarray  #: int64[N] pattern index (``n_patterns``: no clear pattern)
    untended: np.ndarray  #: int64[N, cap] steps since each member was addressed
    traits: np.ndarray  #: float64[N, cap, TR_WARMTH + cap] latent traits (``TR_*``), drawn at reset
    key: np.ndarray  #: uint64[N] episode key
    # the episode
    t: np.ndarray  #: int64[N] steps played
    streak: np.ndarray  #: int64[N] the therapist's consecutive interventions
    interventions: np.ndarray  #: int64[N]
    invalid: np.ndarray  #: int64[N] masked actions played (as listening)
    settled: np.ndarray  #: int64[N] consecutive steps below the settle threshold
    row: np.ndarray  #: int64[N] transcript row count
    start: np.ndarray  #: int64[N] start-table row of the episode
    last_speaker: np.ndarray  #: int64[N] slot, or KEEP
    # the turn the therapist answers (observed: ``speaker``, ``spoken_to``, ``utterance``)
    last_client: np.ndarray  #: int64[N] slot of the latest client turn, or NOBODY
    last_spoken_to: np.ndarray  #: int64[N] whom that turn addressed, as bits (:func:`spoken_to_bits`)
    last_utterance: np.ndarray  #: int64[N] its utterance type, or NOBODY
    # the therapist's last move (observed: ``last_strategy``, ``last_target``), set from the
    # seed rows at a start
    last_strategy: np.ndarray  #: int64[N] strategy, or NOBODY
    last_addressed: np.ndarray  #: int64[N] the members it addressed, bit i for slot i
    untended_turns: np.ndarray  #: int64[N, cap] steps each member went unaddressed
    sigma_return: np.ndarray  #: float64[N] discounted σ* return
    discount: np.ndarray  #: float64[N] gamma ** t
    sigma: np.ndarray  #: float64[N, 4] episode sums of the weighted components (``COMPONENTS``)
    peak: np.ndarray  #: float64[N] worst-off distress seen
    # the last step
    n_turns: np.ndarray  #: int64[N] client turns
    turn_slot: np.ndarray  #: int64[N, cap + 2] speaker of each turn
    turn_type: np.ndarray  #: int64[N, cap + 2] utterance type
    turn_addressee: np.ndarray  #: int64[N, cap + 2] addressee (slot, TO_THERAPIST, TO_GROUP)
    intervened: np.ndarray  #: bool[N]
    step_invalid: np.ndarray  #: bool[N] the action was masked (played as listening)
    step_sigma: np.ndarray  #: float64[N, 4] the weighted components (they sum to the reward)
    behaviour_type: np.ndarray  #: int64[N, cap] client agents' turns: FREE, SILENT or a type
    behaviour_addressee: np.ndarray  #: int64[N, cap]
    # what the adapters hand out
    obs: np.ndarray  #: float32[N, obs_dim] flat observation
    rewards: np.ndarray  #: float64[N]
    terminated: np.ndarray  #: bool[N]
    truncated: np.ndarray  #: bool[N]


class Final(NamedTuple):
    """What :meth:`Core.stats` reads of the episodes that ended in a SAME_STEP call (their
    sessions have already restarted); same names as in :class:`State`."""

    obs: np.ndarray
    n: np.ndarray
    t: np.ndarray
    start: np.ndarray
    interventions: np.ndarray
    invalid: np.ndarray
    sigma_return: np.ndarray
    sigma: np.ndarray
    peak: np.ndarray
    untended_turns: np.ndarray
    distress: np.ndarray


class Tables(NamedTuple):
    """The model: action decoding, the calibrated parameters' tables, scalar settings."""

    act_intervene: np.ndarray  #: bool[A]
    act_target: np.ndarray  #: int64[A]
    act_strategy: np.ndarray  #: int64[A]
    target_slots: np.ndarray  #: bool[cap + 1, T, cap] slots of a target by group size
    target_valid: np.ndarray  #: bool[cap + 1, T]
    params: np.ndarray  #: float64[N_PARAMS] scalars by the ``P_*`` names (changed live)
    effect: np.ndarray
    effect_sd: np.ndarray
    soften: np.ndarray
    pressure: np.ndarray
    second_turn: np.ndarray
    cum_utterance: np.ndarray  #: cumulative ``utterance`` per pattern
    utterance_kind: np.ndarray  #: _KIND_NEGATIVE / _KIND_POSITIVE / 0 per utterance type
    utterance_effect: np.ndarray
    harden: np.ndarray
    cum_transition: np.ndarray  #: cumulative ``transition``, row ``move_row * n_states + pattern`` (2-D)
    fatigue_pow: np.ndarray  #: fatigue ** streak


class Starts(NamedTuple):
    """Start states (rows) and, per seed dialogue, where its rows are (:class:`StartTable`)."""

    n: np.ndarray
    distress: np.ndarray
    stance: np.ndarray
    pattern: np.ndarray
    untended: np.ndarray
    row: np.ndarray
    client: np.ndarray  #: the latest client turn before the cut (as ``State.last_client``)
    spoken_to: np.ndarray
    utterance: np.ndarray
    strategy: np.ndarray  #: the therapist's last move before the cut (as ``State.last_strategy``)
    addressed: np.ndarray
    first: np.ndarray
    count: np.ndarray
    low: np.ndarray


class Scratch(NamedTuple):
    """Scratch space of one transition (allocated once per kernel call)."""

    addressed: np.ndarray
    keys: np.ndarray
    inflow: np.ndarray
    noise: np.ndarray


#: ``last_*`` value: unchanged since the start state (the seed rows' value holds)
KEEP = -1
#: ``last_client`` / ``last_utterance``: no client has spoken yet
NOBODY = -1
#: the weighted σ* components, in the order of the ``sigma`` / ``step_sigma`` columns
COMPONENTS = ("mean_distress", "stance", "max_distress", "intervention_cost")
N_COMPONENTS = len(COMPONENTS)
# Tables.params[·]: scalar parameters, reward weights and episode settings
(
    P_DYAD_SHARE, P_GROUP_SHARE, P_GROWTH, P_SIDELINE, P_CONTAGION, P_D_NOISE, P_S_NOISE,
    P_SPEAK_ADDRESSED, P_SPEAK_DISTRESS, P_ANSWER, P_W_MEAN, P_BETA, P_LAM, P_COST, P_GAMMA,
    P_SETTLE_THRESHOLD, P_SETTLE_STEPS, P_TERMINATE, P_HORIZON, P_FATIGUE,
    P_HETEROGENEITY, P_REACTIVITY_SD, P_VOLATILITY_SD, P_SUSCEPTIBILITY_SD, P_READING_NOISE,
    P_BASELINE_SD, P_WARMTH_SD,
) = range(27)  # fmt: skip
N_PARAMS = 27
# State.traits[e, i, ·]: client i's latent traits, drawn at reset (see "Heterogeneous clients"
# in rescue_env.dynamics.calibrated): three multipliers (neutral 1), the baseline offset
# (neutral 0), then traits[e, i, TR_WARMTH + j] the warmth of the dyad i→j (neutral 0)
TR_REACTIVITY, TR_VOLATILITY, TR_SUSCEPTIBILITY, TR_BASELINE, TR_WARMTH = range(5)
_TRAIT_NAMES = ("reactivity", "volatility", "susceptibility", "baseline")
#: behaviour codes of a client slot (``behaviour_type``): the model decides, or the slot is silent
FREE, SILENT = -2, -1
#: addressee codes (as :data:`rescue_env.dynamics.base.TO_THERAPIST` / ``TO_GROUP``)
TO_THERAPIST, TO_GROUP = -1, -2
#: the utterance types a turn's ``turn_type`` indexes (the observation's ``utterance``)
N_UTTERANCE = len(UTTERANCE_TYPES)

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

#: How every helper of the kernel is compiled. ``forceinline``: numba types and caches it once,
#: and LLVM pastes its machine code into the kernel, so a per-session call costs no call and
#: no reference counting of its array arguments (with calls, the counting was a fifth of a
#: step). ``error_model="numpy"``: no Python exception path for a division by zero (every
#: division is guarded, so no number changes); a raise path keeps the reference counts that
#: numba otherwise prunes. No Python or C wrappers: only compiled code calls these, and
#: building wrappers costs compile time for nothing.
_compiled_part = functools.partial(njit, cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True, forceinline=True, error_model="numpy")

# The random-number helpers have one signature each: numba would otherwise compile them again
# for every literal draw index they are called with.


@_compiled_part("uint64(uint64)")
def mix64(z):
    """splitmix64's finaliser: a bijective hash of a 64-bit word."""
    z = z + _GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit("uint64(uint64, int64, int64)", cache=True)
def _bits(key, step, draw):
    return mix64(key ^ mix64(np.uint64(step) * _STEP_MUL + np.uint64(draw)))


@_compiled_part("float64(uint64, int64, int64)")
def _uniform(key, step, draw):
    """A uniform in (0, 1] from (key, step, draw)."""
    return float((_bits(key, step, draw) >> _S11) + _ONE) * (1.0 / 9007199254740992.0)


@_compiled_part("float64(uint64, int64, int64)")
def _normal(key, step, draw):
    """One standard normal from the counter uniforms ``draw`` and ``draw + 1``."""
    u1 = _uniform(key, step, draw)
    u2 = _uniform(key, step, draw + 1)
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


@_compiled_part("void(uint64, int64, int64, float64[::1], int64, int64)")
def _normals(key, step, count, out, unused, every):
    """The step's first ``count`` standard normals into ``out`` (Box–Muller: each pair of
    counter uniforms gives two), except entries ``unused``, ``unused + every``, … that the
    caller does not read (left as they were): their cosine or sine is not computed, the
    pair's other entry is the same number either way."""
    for k in range(0, count, 2):
        u1 = _uniform(key, step, _N_STANDARD + k)
        u2 = _uniform(key, step, _N_STANDARD + k + 1)
        r = math.sqrt(-2.0 * math.log(u1))
        if k == unused:
            unused += every
        else:
            out[k] = r * math.cos(2.0 * math.pi * u2)
        if k + 1 == unused:
            unused += every
        elif k + 1 < count:
            out[k + 1] = r * math.sin(2.0 * math.pi * u2)


@njit("uint64(uint64)", cache=True)
def next_key(key):
    """The key of the episode after the one keyed ``key``."""
    return mix64(key ^ _NEXT_SALT)


@_compiled_part("int64(float64[:, ::1], int64, float64)")
def _draw_from(cum, r, u):
    """The index drawn by the uniform ``u`` from row ``r`` of the cumulative weights ``cum``
    (bisect right of ``u`` times the row's total; the last index at most). Row and index, not
    a row view: a view is built and reference-counted per call."""
    last = cum.shape[1] - 1
    x = u * cum[r, last]
    lo, hi = 0, cum.shape[1]
    while lo < hi:
        mid = (lo + hi) // 2
        if x < cum[r, mid]:
            hi = mid
        else:
            lo = mid + 1
    return min(lo, last)


@_compiled_part("float64(float64, float64, float64)")
def _clip(x, lo, hi):
    """``x`` clipped to [lo, hi] (NaN passes through, as numpy's clip)."""
    return lo if x < lo else (hi if x > hi else x)


# -- the transition, part by part (rescue_env.dynamics.calibrated states each) ----------------
# Each part is compiled once, on its own, and takes the arrays it reads and writes (distress
# ``D``, stances ``G``, traits ``TR``…) and the session ``e``: what a part touches is in its
# signature, and numba types it once, not again per caller. Whole arrays and an index, not row
# views: a view is built and reference-counted per call. See _compiled_part for the options.


@_compiled_part
def _decode(action, n, act_intervene, act_target, act_strategy, target_valid, target_slots, addressed):
    """The therapist's flat action for a group of ``n``: ``(intervene, invalid, strategy,
    target, members addressed)``; ``addressed`` marks the slots. A target naming an absent
    member is played as listening, and flagged ``invalid``. The tables are read before any
    branch: an array last read in one branch keeps reference counts the compiler cannot
    pair up (listening's table row is a valid one)."""
    moves, target, strategy = act_intervene[action], act_target[action], act_strategy[action]
    valid = target_valid[n, target]
    intervene = moves and valid
    invalid = moves and not valid
    s = strategy if intervene else -1
    target = target if moves else -1
    k = 0
    for i in range(addressed.shape[0]):
        addressed[i] = intervene and i < n and target_slots[n, target, i]
        if addressed[i]:
            k += 1
    return intervene, invalid, s, target, k


@_compiled_part
def _therapist_effect(D, G, TR, e, addressed, n, k, P, effect, sd, soften, mult, key, step):
    """1. The move's effect (``effect`` mean and ``sd`` spread of its (pattern, strategy)
    cell), spread over the ``k`` people addressed and fading with the streak (``mult``), times
    each client's reactivity; their stances soften; the most distressed member, if not
    addressed, feels sidelined (first: the effects below touch only the addressed, and with
    no array last used in a branch the compiler pairs up the reference counts)."""
    share = 1.0 if k == 1 else (P[P_GROUP_SHARE] if k >= n else P[P_DYAD_SHARE])
    sideline = P[P_SIDELINE]
    worst = 0
    for i in range(1, n):
        if D[e, i] > D[e, worst]:
            worst = i
    if not addressed[worst]:
        D[e, worst] += sideline
    scale = mult * share
    soft = soften * scale
    for i in range(n):
        if addressed[i]:
            # the cell's mean, spread over the people addressed, and its own per-person
            # spread, fading with the streak like the mean (one person's response: no share)
            eff = effect * scale + (sd * mult * _normal(key, step, _U_EFFECT + 2 * i) if sd > 0.0 else 0.0)
            D[e, i] += eff * TR[e, i, TR_REACTIVITY]
            for j in range(n):
                G[e, i, j] += soft * (1.0 - G[e, i, j])


@_compiled_part
def _bucket(D, e, addressed, n, grow, push):
    """2. Untended distress feeds on itself (``grow``); the pattern presses on everyone."""
    for i in range(n):
        D[e, i] = (D[e, i] if addressed[i] else D[e, i] * grow) + push


@_compiled_part("int64(float64[:, :, ::1], int64, int64, int64, int64, boolean, float64, float64)")
def _addressee(G, e, n, slot, kind, addressed_slot, answer_u, p_answer):
    """Whom ``slot``'s utterance of ``kind`` goes to: the therapist, or the member they regard
    worst (accusations, defences, withdrawals), best (repair, validation) or most neutrally
    (small talk)."""
    if n <= 1 or (addressed_slot and answer_u < p_answer):
        return TO_THERAPIST
    pick = -1
    for j in range(n):
        if j == slot:
            continue
        if pick < 0:
            pick = j
        elif kind == _KIND_NEGATIVE:
            if G[e, slot, j] < G[e, slot, pick]:
                pick = j
        elif kind == _KIND_POSITIVE:
            if G[e, slot, j] > G[e, slot, pick]:
                pick = j
        elif abs(G[e, slot, j]) < abs(G[e, slot, pick]):
            pick = j
    return pick if (kind != 0 or not addressed_slot) else TO_THERAPIST


@_compiled_part
def _choose_turns(D, G, e, addressed, keys, n, key, step, P, second_turn, cum_utterance, p, kinds, BT, BA, TS, TT, TA):
    """3a. The step's client turns, all chosen before any takes effect: client agents' turns
    first (``BT``/``BA``: ``behaviour_type``/``behaviour_addressee``, slot order), then one or
    two (``second_turn``) the model draws: who by Gumbel-max over being addressed and distress,
    the type from pattern ``p``'s utterance mix (row ``p`` of ``cum_utterance``), then the addressee. Written to row
    ``e`` of ``TS``/``TT``/``TA`` (``turn_slot``/``turn_type``/``turn_addressee``); returns the
    count."""
    n_model = 2 if (n > 1 and _uniform(key, step, _U_SECOND) < second_turn) else 1
    for i in range(n):
        gumbel = -math.log(-math.log(min(_uniform(key, step, _U_SPEAKER + i), 1.0 - 1e-16)))
        keys[i] = P[P_SPEAK_ADDRESSED] * (1.0 if addressed[i] else 0.0) + P[P_SPEAK_DISTRESS] * D[e, i] + gumbel
    answer_u = _uniform(key, step, _U_ANSWER)
    n_turns = 0
    for i in range(n):
        if BT[e, i] >= 0:
            TS[e, n_turns], TT[e, n_turns], TA[e, n_turns] = i, BT[e, i], BA[e, i]
            n_turns += 1
    first = -1
    for t_k in range(n_model):
        best = -1
        for i in range(n):  # the highest key; the lowest slot on ties
            if i != first and (best < 0 or keys[i] > keys[best]):
                best = i
        first = best
        if BT[e, best] != FREE:  # a client agent decides this slot
            continue
        utype = _draw_from(cum_utterance, p, _uniform(key, step, _U_TYPE + t_k))
        TS[e, n_turns], TT[e, n_turns] = best, utype
        TA[e, n_turns] = _addressee(G, e, n, best, kinds[utype], addressed[best], answer_u, P[P_ANSWER])
        n_turns += 1
    return n_turns


@_compiled_part
def _hear_turns(D, G, e, n, n_turns, TS, TT, TA, utterance_effect):
    """3b. What is said moves the addressee's distress and stance toward the speaker (the
    whole group at half strength)."""
    for t_k in range(n_turns):
        slot = TS[e, t_k]
        addressee = TA[e, t_k]
        dd = utterance_effect[TT[e, t_k], 0]
        dg = utterance_effect[TT[e, t_k], 1]
        if addressee >= 0 and addressee != slot:
            D[e, addressee] += dd
            G[e, addressee, slot] += dg
        elif addressee == TO_GROUP:
            for j in range(n):
                if j != slot:
                    D[e, j] += 0.5 * dd
                    G[e, j, slot] += 0.5 * dg


@_compiled_part
def _ripple(D, G, TR, e, n, contagion, inflow):
    """4. Distress flows from more to less distressed members along hostile edges (among
    ``m`` members: none alone; loops that run zero times rather than a branch or an early
    return, after which the compiler cannot pair up the arrays' reference counts)."""
    m = n if n > 1 else 0
    c = contagion / (m - 1) if m > 1 else 0.0
    for i in range(m):
        inflow[i] = 0.0
        for j in range(m):
            if j != i and D[e, j] > D[e, i]:
                hostility = -0.5 * (G[e, i, j] + G[e, j, i])
                if hostility > 0:
                    inflow[i] += hostility * (D[e, j] - D[e, i])
    for i in range(m):
        D[e, i] += c * inflow[i] * TR[e, i, TR_SUSCEPTIBILITY]


@_compiled_part
def _stance_drift(D, G, TR, e, n, harden, d_noise, s_noise, key, step, noise):
    """5. Stances harden (or warm) with the pattern (``harden``) and drift by the dyad's
    warmth; noise on distress and stances; both clipped to their ranges."""
    toward, rate = (-1.0, harden) if harden >= 0 else (1.0, -harden)
    _normals(key, step, n + n * n, noise, n, n + 1)  # n + i (n + 1): the unread diagonal
    for i in range(n):
        D[e, i] = _clip(D[e, i] + d_noise * TR[e, i, TR_VOLATILITY] * noise[i], 0.0, 1.0)
        for j in range(n):
            if j == i:
                G[e, i, j] = 0.0
                continue
            y = G[e, i, j] + rate * (toward - G[e, i, j]) + TR[e, i, TR_WARMTH + j] + s_noise * noise[n + i * n + j]
            G[e, i, j] = _clip(y, -1.0, 1.0)


@_compiled_part
def _next_pattern(cum_transition, intervene, s, mult, p, key, step):
    """6. The next pattern: the move's row of the transition with probability ``mult``
    (fading with fatigue, like its effect), else the listening row (``cum_transition``: row
    ``move_row * n_states + p`` of the cumulative transition from pattern ``p``, where
    ``n_states`` (its column count) is the number of patterns plus "none")."""
    row = 1 + s if (intervene and _uniform(key, step, _U_PULL) < mult) else 0
    return _draw_from(cum_transition, row * cum_transition.shape[1] + p, _uniform(key, step, _U_PATTERN))


@_compiled_part
def _untended(UNT, UT, e, addressed, n):
    """7a. Steps since each member was addressed; steps each went unaddressed."""
    for i in range(n):
        UNT[e, i] = 0 if addressed[i] else UNT[e, i] + 1
        if not addressed[i]:
            UT[e, i] += 1


# with a Python wrapper: Core.set_turns calls it
@njit("int64(int64, int64)", cache=True, forceinline=True, error_model="numpy")
def _spoken_to_bit(addressee, cap):
    """The bit of a turn's ``addressee`` code in ``spoken_to`` (:func:`spoken_to_bits`)."""
    if addressee >= 0:
        return 1 << addressee
    return 1 << cap if addressee == TO_THERAPIST else 1 << (cap + 1)


@njit(cache=True, inline="always")
def _book(S, live):
    """7b. Bookkeeping of sessions ``live`` after their transition set the step's flags: the
    streak, the last speaker, the counts, rows, clock (arrays bound before the loop, as in
    :func:`_transition`)."""
    streak, interventions, last_speaker, invalid = S.streak, S.interventions, S.last_speaker, S.invalid
    for e in live:
        intervene, n_turns = S.intervened[e], S.n_turns[e]
        if intervene:
            streak[e] += 1
            interventions[e] += 1
        else:
            streak[e] = 0
        if n_turns:
            last_speaker[e] = S.last_client[e] = S.turn_slot[e, n_turns - 1]
            S.last_spoken_to[e] = _spoken_to_bit(S.turn_addressee[e, n_turns - 1], S.distress.shape[1])
            S.last_utterance[e] = S.turn_type[e, n_turns - 1]
        if S.step_invalid[e]:
            invalid[e] += 1
        S.row[e] += (1 if intervene else 0) + n_turns
        S.t[e] += 1


@njit(cache=True, inline="always")
def _transition(S, T, W, actions, live):
    """The calibrated model moves sessions ``live`` one step under the therapist's flat
    actions (``actions[e]``): distress, stances, pattern, the step's client turns and flags,
    then the bookkeeping (:func:`_book`). A phase loops over the sessions itself: the
    structures are handed to it once per call, not once per session.

    The arrays the parts take are bound to names once, before the session loop: reading a
    structure's field is a new reference, counted up and down (atomically) each time, and
    inside the loop that count was a fifth of a step's time."""
    P, addressed, keys, inflow, noise = T.params, W.addressed, W.keys, W.inflow, W.noise
    D, G, TR, UNT, UT = S.distress, S.stance, S.traits, S.untended, S.untended_turns
    BT, BA, TS, TT, TA = S.behaviour_type, S.behaviour_addressee, S.turn_slot, S.turn_type, S.turn_addressee
    act_intervene, act_target, act_strategy, target_valid, target_slots = T.act_intervene, T.act_target, T.act_strategy, T.target_valid, T.target_slots
    cum_utterance, kinds, utterance_effect, cum_transition, fatigue_pow = T.cum_utterance, T.utterance_kind, T.utterance_effect, T.cum_transition, T.fatigue_pow
    for e in live:
        n, p, key, step = S.n[e], S.pattern[e], S.key[e], S.t[e]
        intervene, invalid, s, _, k = _decode(actions[e], n, act_intervene, act_target, act_strategy, target_valid, target_slots, addressed)
        mult = fatigue_pow[min(S.streak[e], fatigue_pow.shape[0] - 1)] if intervene else 0.0
        if intervene:
            _therapist_effect(D, G, TR, e, addressed, n, k, P, T.effect[p, s], T.effect_sd[p, s], T.soften[s], mult, key, step)
            S.last_strategy[e] = s
            bits = 0
            for i in range(n):
                if addressed[i]:
                    bits |= 1 << i
            S.last_addressed[e] = bits
        _bucket(D, e, addressed, n, 1.0 + P[P_GROWTH], T.pressure[p])
        n_turns = _choose_turns(D, G, e, addressed, keys, n, key, step, P, T.second_turn[p], cum_utterance, p, kinds, BT, BA, TS, TT, TA)
        _hear_turns(D, G, e, n, n_turns, TS, TT, TA, utterance_effect)
        _ripple(D, G, TR, e, n, P[P_CONTAGION], inflow)
        _stance_drift(D, G, TR, e, n, T.harden[p], P[P_D_NOISE], P[P_S_NOISE], key, step, noise)
        S.pattern[e] = _next_pattern(cum_transition, intervene, s, mult, p, key, step)
        _untended(UNT, UT, e, addressed, n)
        S.intervened[e], S.step_invalid[e], S.n_turns[e] = intervene, invalid, n_turns
    _book(S, live)


# -- σ*, episode end, observation ------------------------------------------------------------


def observation_layout(cap: int, n_patterns: int, n_strategies: int) -> dict[str, tuple[int, ...]]:
    """The parts of the flat observation and their shapes, in the order :func:`write_observation`
    writes them (their names sorted: gymnasium's ``flatten`` of the env's ``Dict`` space)."""
    return {
        "distress": (cap,),
        "last_strategy": (n_strategies,),  # the therapist's own last move: its strategy,
        "last_target": (cap,),  # whom it addressed
        "pattern": (n_patterns + 1,),  # one-hot, the last: no clear pattern
        "present": (cap,),
        "speaker": (cap,),  # the turn the therapist answers: who spoke last,
        "spoken_to": (cap + 2,),  # to whom (members, the therapist, the group),
        "stance": (cap, cap),
        "tempo": (2,),
        "untended": (cap,),
        "utterance": (N_UTTERANCE,),  # how (its utterance type)
    }


# compiled as a _compiled_part, with a Python wrapper: Observer.observe_state calls it
@njit("void(float32[:, ::1], int64, float64[:, ::1], float64[:, :, ::1], int64, int64, int64, int64, int64[:, ::1], float64, int64, int64, int64, int64, int64, int64, int64, int64)", cache=True, forceinline=True, error_model="numpy")
def write_observation(O, e, D, G, n, pattern, t, streak, UNT, horizon, n_patterns, client, spoken_to, utterance, n_utterance, strategy, addressed, n_strategies):
    """Write row ``e``'s flat observation into ``O[e]`` from ``D[e]``, ``G[e]``, ``UNT[e]`` and
    the turn the therapist answers (``client``: its speaker's slot or ``NOBODY``;
    ``spoken_to``: whom it addressed, as :func:`spoken_to_bits`; ``utterance``: its type or
    ``NOBODY``) and the therapist's last move (``strategy``: its index or ``NOBODY``;
    ``addressed``: the members it addressed, bit ``i`` for slot ``i``): distress,
    last_strategy, last_target, pattern one-hot, present, speaker, spoken_to, stance, tempo,
    untended, utterance (gymnasium's ``flatten`` of the ``Dict`` observation, keys sorted).
    Rows are indexed, not sliced: no array views."""
    cap = D.shape[1]
    for i in range(cap):
        O[e, i] = D[e, i]
    off = cap
    for q in range(n_strategies):
        O[e, off + q] = 1.0 if q == strategy else 0.0
    off += n_strategies
    for i in range(cap):
        O[e, off + i] = 1.0 if (addressed >> i) & 1 else 0.0
    off += cap
    for q in range(n_patterns + 1):
        O[e, off + q] = 1.0 if q == pattern else 0.0
    off += n_patterns + 1
    for i in range(cap):
        O[e, off + i] = 1.0 if i < n else 0.0
    off += cap
    for i in range(cap):
        O[e, off + i] = 1.0 if i == client else 0.0
    off += cap
    for i in range(cap + 2):
        O[e, off + i] = 1.0 if (spoken_to >> i) & 1 else 0.0
    off += cap + 2
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
    off += cap
    for u in range(n_utterance):
        O[e, off + u] = 1.0 if u == utterance else 0.0


@_compiled_part
def _read_distress(O, e, D, TR, n, sd, key, t):
    """The observation model: what is seen (``O[e]``, the row's first ``n`` entries) is a noisy
    reading of latent distress ``D[e]`` (σ* uses the latent state); a volatile client's reading
    swings more."""
    for i in range(n):
        O[e, i] = _clip(D[e, i] + sd * TR[e, i, TR_VOLATILITY] * _normal(key, t, _U_READING + 2 * i), 0.0, 1.0)


@_compiled_part
def _observe_row(O, e, D, G, n, pattern, t, streak, UNT, horizon, n_patterns, client, spoken_to, utterance, strategy, addressed, n_strategies, TR, reading_noise, key):
    """Write row ``e``'s flat observation (:func:`write_observation`), its distress read with
    ``reading_noise``. A start state (``t`` 0) is the seed dialogue's own annotation (already a
    reading, moved by the drawn clients' baseline): it is shown as it is."""
    write_observation(O, e, D, G, n, pattern, t, streak, UNT, horizon, n_patterns, client, spoken_to, utterance, N_UTTERANCE, strategy, addressed, n_strategies)
    if reading_noise > 0.0 and t > 0:
        _read_distress(O, e, D, TR, n, reading_noise, key, t)


@njit(cache=True, inline="always")
def _observe(S, P, n_patterns, n_strategies, sessions):
    """Write the flat observations of ``sessions`` into their rows of ``obs`` (arrays bound
    before the loop, as in :func:`_transition`)."""
    O, D, G, UNT, TR = S.obs, S.distress, S.stance, S.untended, S.traits
    for e in sessions:
        _observe_row(O, e, D, G, S.n[e], S.pattern[e], S.t[e], S.streak[e], UNT, P[P_HORIZON], n_patterns, S.last_client[e], S.last_spoken_to[e], S.last_utterance[e], S.last_strategy[e], S.last_addressed[e], n_strategies, TR, P[P_READING_NOISE], S.key[e])


@_compiled_part
def _sigma_star(D, G, e, n, intervened, P, C):
    """σ* of session ``e``'s group of ``n`` in distress ``D[e]`` and stances ``G[e]``
    (:mod:`rescue_env.reward`): its weighted components into ``C[e]`` (``COMPONENTS``), returns
    ``(reward, worst-off distress)``."""
    total = 0.0
    max_d = D[e, 0]
    for i in range(n):
        total += D[e, i]
        if D[e, i] > max_d:
            max_d = D[e, i]
    stance_total = 0.0  # a plain left-to-right sum, as GroupState.mean_stance
    for i in range(n):
        for j in range(n):
            stance_total += G[e, i, j]
    mean_stance = stance_total / (n * (n - 1)) if n >= 2 else 0.0
    C[e, 0] = -P[P_W_MEAN] * (total / n)
    C[e, 1] = P[P_BETA] * mean_stance
    C[e, 2] = -P[P_LAM] * max_d
    C[e, 3] = -P[P_COST] * (1.0 if intervened else 0.0)
    return C[e, 0] + C[e, 1] + C[e, 2] + C[e, 3], max_d


@njit(cache=True, inline="always")
def _finish(S, P, n_patterns, n_strategies, live):
    """σ* of the states sessions ``live`` reached and their episodes' book, end, observation."""
    D, G, step_sigma = S.distress, S.stance, S.step_sigma
    for e in live:
        reward, max_d = _sigma_star(D, G, e, S.n[e], S.intervened[e], P, step_sigma)
        S.rewards[e] = reward
        S.sigma_return[e] += S.discount[e] * reward
        S.discount[e] *= P[P_GAMMA]
        for k in range(N_COMPONENTS):
            S.sigma[e, k] += S.step_sigma[e, k]
        if max_d > S.peak[e]:
            S.peak[e] = max_d
        settled = S.settled[e] + 1 if max_d < P[P_SETTLE_THRESHOLD] else 0
        S.settled[e] = settled
        term = P[P_TERMINATE] != 0.0 and settled >= P[P_SETTLE_STEPS]
        S.terminated[e] = term
        S.truncated[e] = (not term) and S.t[e] >= P[P_HORIZON]
    _observe(S, P, n_patterns, n_strategies, live)


# -- fresh episodes ----------------------------------------------------------------------------


@_compiled_part
def _draw_traits(TR, e, n, key, P):
    """Draw session ``e``'s ``n`` clients' latent traits and dyads' warmth into ``TR[e]`` from
    its episode key (reset draws, the normals' indices ``_U_TRAITS`` / ``_U_BASELINE`` /
    ``_U_WARMTH``; the dialogue and cut use draws 0 and 1). ``heterogeneity`` 0 gives every
    client the mean client's traits (multipliers 1, baseline offset and warmth 0). Padding
    slots get the mean client's: nothing reads them, and each draw has its own counter, so
    not drawing them changes no member's."""
    h = P[P_HETEROGENEITY]
    cap = TR.shape[1]
    for i in range(cap):
        base = _U_TRAITS + 6 * i
        if i >= n:
            TR[e, i, TR_REACTIVITY] = TR[e, i, TR_VOLATILITY] = TR[e, i, TR_SUSCEPTIBILITY] = 1.0
            for j in range(TR_BASELINE, TR.shape[2]):
                TR[e, i, j] = 0.0
            continue
        TR[e, i, TR_REACTIVITY] = 1.0 + h * P[P_REACTIVITY_SD] * _normal(key, _RESET_STEP, base)
        TR[e, i, TR_VOLATILITY] = math.exp(h * P[P_VOLATILITY_SD] * _normal(key, _RESET_STEP, base + 2))
        TR[e, i, TR_SUSCEPTIBILITY] = math.exp(h * P[P_SUSCEPTIBILITY_SD] * _normal(key, _RESET_STEP, base + 4))
        sd = h * P[P_BASELINE_SD]
        TR[e, i, TR_BASELINE] = sd * _normal(key, _RESET_STEP, _U_BASELINE + 2 * i) if sd > 0.0 else 0.0
        sd = h * P[P_WARMTH_SD]
        for j in range(cap):
            w = 0.0
            if sd > 0.0 and j != i and j < n:
                w = sd * _normal(key, _RESET_STEP, _U_WARMTH + 2 * (8 * i + j))
            TR[e, i, TR_WARMTH + j] = w


@_compiled_part
def _copy_start(D0, G0, UNT0, s, n, D, G, UNT, UT, TR, e, baseline):
    """Session ``e``'s rows from start-table row ``s`` (``D0``, ``G0``, ``UNT0``: the table's
    distress, stances, untended counters): distress (moved by the drawn clients'
    ``baseline`` offsets, when asked), stances, untended counters (``UT``: untended turns,
    0); returns the worst-off distress. Element loops, not slice assignments: numba compiles
    each array-to-slice assignment into a general broadcasting routine, seconds apiece."""
    cap = D.shape[1]
    for i in range(cap):
        D[e, i] = D0[s, i]
        UNT[e, i] = UNT0[s, i]
        UT[e, i] = 0
        for j in range(cap):
            G[e, i, j] = G0[s, i, j]
    if baseline:  # the drawn client's distress sits above or below the seed person's
        for i in range(n):
            D[e, i] = _clip(D[e, i] + TR[e, i, TR_BASELINE], 0.0, 1.0)
    peak = D[e, 0]
    for i in range(n):
        if D[e, i] > peak:
            peak = D[e, i]
    return peak


@njit(cache=True, inline="always")
def _begin(S, P, ST, sessions, dialogues, rows, streaks, baseline, n_patterns, n_strategies):
    """Start ``sessions`` (their keys already set): session ``sessions[k]`` from seed dialogue
    ``dialogues[k]`` cut at ``rows[k]`` (:func:`_draw_start`) with the therapist's
    ``streaks[k]``; the clients' traits are drawn from the key, and with ``baseline`` their
    distress moves by their drawn baseline offset (a reset from a seed dialogue; not a state
    :meth:`Core.load` put in: a real person's state already holds their baseline). The step
    outputs (reward, flags) are left to the caller."""
    for k in range(sessions.shape[0]):
        e = sessions[k]
        start = _draw_start(S.key[e], dialogues[k], rows[k], ST.first, ST.count, ST.low)
        n = ST.n[start]
        S.n[e] = n
        S.pattern[e] = ST.pattern[start]
        S.row[e] = ST.row[start]
        S.start[e] = start
        S.streak[e] = streaks[k]
        S.t[e] = S.interventions[e] = S.invalid[e] = S.settled[e] = S.n_turns[e] = 0
        S.last_speaker[e] = KEEP
        S.last_client[e], S.last_spoken_to[e], S.last_utterance[e] = ST.client[start], ST.spoken_to[start], ST.utterance[start]
        S.last_strategy[e], S.last_addressed[e] = ST.strategy[start], ST.addressed[start]
        S.intervened[e] = S.step_invalid[e] = False
        S.sigma_return[e] = 0.0
        S.discount[e] = 1.0
        for c in range(N_COMPONENTS):
            S.sigma[e, c] = S.step_sigma[e, c] = 0.0
        _draw_traits(S.traits, e, n, S.key[e], P)
        S.peak[e] = _copy_start(ST.distress, ST.stance, ST.untended, start, n, S.distress, S.stance, S.untended, S.untended_turns, S.traits, e, baseline)
    _observe(S, P, n_patterns, n_strategies, sessions)


@njit(cache=True, inline="always")
def _draw_start(key, dialogue, row, first, count, low):
    """The start-table row of a reset: the dialogue (``-1``: drawn uniformly) cut at ``row``
    (``-1``: drawn uniformly from the dialogue's ``min_prefix`` to its last row); ``first``,
    ``count``, ``low``: the start table's (:class:`Starts`)."""
    n_dialogues = first.shape[0]
    if dialogue < 0:
        dialogue = min(int(_uniform(key, _RESET_STEP, 0) * n_dialogues), n_dialogues - 1)
    n_rows = count[dialogue] - 1
    if row < 0:
        lo = low[dialogue]
        row = lo + min(int(_uniform(key, _RESET_STEP, 1) * (n_rows - lo)), n_rows - lo - 1) if n_rows > 1 else 0
    return first[dialogue] + row


@njit(cache=True, inline="always")
def _keep_final(S, X, sessions):
    """Copy what :meth:`Core.stats` reads of the ended episodes of ``sessions`` into ``X``."""
    for e in sessions:
        for i in range(S.obs.shape[1]):
            X.obs[e, i] = S.obs[e, i]
        X.n[e], X.t[e], X.start[e] = S.n[e], S.t[e], S.start[e]
        X.interventions[e], X.invalid[e] = S.interventions[e], S.invalid[e]
        X.sigma_return[e], X.peak[e] = S.sigma_return[e], S.peak[e]
        for c in range(N_COMPONENTS):
            X.sigma[e, c] = S.sigma[e, c]
        for i in range(S.distress.shape[1]):
            X.untended_turns[e, i] = S.untended_turns[e, i]
            X.distress[e, i] = S.distress[e, i]


@njit(cache=True, inline="always")
def _clear(S, sessions):
    """A fresh episode's first outputs: reward 0, not ended."""
    for e in sessions:
        S.rewards[e] = 0.0
        S.terminated[e] = False
        S.truncated[e] = False


@_compiled_part("UniTuple(int64[::1], 2)(int64[::1], boolean[::1], boolean[::1])")
def _split_ended(sessions, terminated, truncated):
    """``sessions`` split into those whose episode goes on and those whose episode ended."""
    going = np.empty(sessions.shape[0], np.int64)
    ended = np.empty(sessions.shape[0], np.int64)
    n_going = n_ended = 0
    for e in sessions:
        if terminated[e] or truncated[e]:
            ended[n_ended] = e
            n_ended += 1
        else:
            going[n_going] = e
            n_going += 1
    return going[:n_going], ended[:n_ended]


#: tasks of :func:`_kernel`
_RESET, _LOAD, _STEP, _TRANSITION, _FINISH = range(5)
#: autoreset modes of a step (:meth:`Core.step`): none; SB3's (an episode that ends starts the
#: next one in the same call, what :meth:`Core.stats` reads of it kept first); gymnasium ≥ 1.0's
#: (a session whose episode ended at the previous call starts the next one instead of
#: stepping, with reward 0)
NO_AUTORESET, SAME_STEP, NEXT_STEP = 0, 1, 2


@njit(cache=True, no_cfunc_wrapper=True, error_model="numpy")  # numpy errors: see _compiled_part
def _kernel(task, mode, idx, actions, dialogues, rows, streaks, s, x, t, st, n_patterns):
    """The one compiled entry point: start sessions ``idx`` (``_RESET``: from the seed
    dialogues ``dialogues`` cut at ``rows``, ``-1`` drawn; ``_LOAD``: from the start table's
    row 0 with the therapist's ``streaks``), or move every session under ``actions``
    (``_STEP`` in autoreset ``mode``; ``_TRANSITION`` or ``_FINISH``, its two halves).

    The structures come as plain tuples (numba reads a plain tuple of arrays from Python
    several times faster than a NamedTuple) and are named here. The phases are inlined
    once, here, and each loops over its sessions (sessions are independent: a session's
    numbers do not depend on the order)."""
    S, X, T, ST = State(*s), Final(*x), Tables(*t), Starts(*st)
    P = T.params
    n_strategies = T.soften.shape[0]
    starting = task == _RESET or task == _LOAD
    fresh = idx  # the sessions that start an episode in this call
    if not starting:
        live = np.arange(S.n.shape[0])
        live, fresh = _split_ended(live, S.terminated, S.truncated) if task == _STEP and mode == NEXT_STEP else (live, live[:0])
        if task != _FINISH:
            cap = S.distress.shape[1]
            W = Scratch(np.zeros(cap, np.bool_), np.zeros(cap), np.zeros(cap), np.zeros(cap + cap * cap + 1))
            _transition(S, T, W, actions, live)
        if task != _TRANSITION:
            _finish(S, P, n_patterns, n_strategies, live)
        if task == _STEP and mode == SAME_STEP:
            fresh = _split_ended(live, S.terminated, S.truncated)[1]
            _keep_final(S, X, fresh)  # this call's outputs stay the ended episodes'
        for e in fresh:  # the next episode of an autoreset: its key chains from this one
            S.key[e] = next_key(S.key[e])
        dialogues = rows = np.full(fresh.shape[0], -1, np.int64)
        streaks = np.zeros(fresh.shape[0], np.int64)
    if fresh.shape[0]:  # each phase called hands the structures over: only when it has work
        _begin(S, P, ST, fresh, dialogues, rows, streaks, task != _LOAD, n_patterns, n_strategies)
        if starting or mode == NEXT_STEP:
            _clear(S, fresh)


_import_notice.__exit__()


# ------------------------------------------------------------------------------------------
# Python side: tables, start states, the Core object


class StartTable:
    """The start states of every (seed dialogue, cut row): the state after the dialogue's
    first ``k`` rows for every ``k`` from 0 to its length, computed once (one pass per
    dialogue) and stored as arrays for the core's resets (:attr:`arrays`).

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
        n_dialogues = len(self.dialogues)
        self.arrays = _empty_starts(sum(len(d.rows) + 1 for d in self.dialogues), n_dialogues, cap)
        index = {p: i for i, p in enumerate(patterns)}
        a = self.arrays
        s = 0
        for k, dialogue in enumerate(self.dialogues):
            members = tuple(dialogue.participants)
            if not 1 <= len(members) <= cap:
                raise ValueError(f"dialogue {dialogue.sample_id!r} has {len(members)} participants; the env holds 1..{cap} (env.max_members)")
            self.members.append(members)
            a.first[k], a.count[k] = s, len(dialogue.rows) + 1
            a.low[k] = min(min_prefix, max(len(dialogue.rows) - 1, 0))
            tracker = StateTracker(dialogue.scenario, members)
            for cut in range(len(dialogue.rows) + 1):
                if cut:
                    tracker.update(dialogue.rows[cut - 1])
                st = tracker.state.copy()
                _put_start(a, s, st, index.get(st.pattern, len(index)) if st.pattern else len(index))
                self.origin.append((k, cut))
                self.snapshots.append(st)
                s += 1

    def rows_of(self, k: int) -> int:
        """The number of rows of seed dialogue ``k`` (its cut rows are 0 to this)."""
        return len(self.dialogues[k].rows)

    def index_of(self, sample_id: str) -> int:
        """The dialogue index of ``sample_id`` (``ValueError`` naming the choices if absent)."""
        for k, d in enumerate(self.dialogues):
            if d.sample_id == sample_id:
                return k
        raise ValueError(f"no seed dialogue {sample_id!r}; have {[d.sample_id for d in self.dialogues]}")


def _empty_starts(n_starts: int, n_dialogues: int, cap: int) -> Starts:
    z = lambda *shape: np.zeros(shape, np.int64)  # noqa: E731
    return Starts(
        z(n_starts), np.zeros((n_starts, cap)), np.zeros((n_starts, cap, cap)), z(n_starts), z(n_starts, cap), z(n_starts),
        np.full(n_starts, NOBODY, np.int64), z(n_starts), np.full(n_starts, NOBODY, np.int64), np.full(n_starts, NOBODY, np.int64), z(n_starts),
        z(n_dialogues), z(n_dialogues), z(n_dialogues),
    )  # fmt: skip


def move_codes(st: GroupState) -> tuple[int, int]:
    """The therapist's last move in ``st`` as the core holds it: its strategy's index
    (``NOBODY`` where none, or outside the taxonomy) and the members it addressed (bit ``i``
    for slot ``i``)."""
    names = strategies(st.scenario)
    strategy = names.index(st.last_strategy) if st.last_strategy in names else NOBODY
    return strategy, sum(1 << st.members.index(m) for m in set(st.last_target) if m in st.members)


def turn_codes(st: GroupState, cap: int) -> tuple[int, int, int]:
    """The turn the therapist answers in ``st`` as the core holds it: the latest client's
    slot, whom the last row addressed (:func:`spoken_to_bits`), the last row's utterance type
    (``NOBODY`` where unknown, e.g. before the first row or for a type outside the taxonomy)."""
    index = {m: i for i, m in enumerate(st.members)}
    client = index.get(st.last_client, NOBODY) if st.last_client is not None else NOBODY
    utterance = UTTERANCE_TYPES.index(st.last_utterance_type) if st.last_utterance_type in UTTERANCE_TYPES else NOBODY
    return client, spoken_to_bits(st.last_addressee, st.members, GROUP_LABELS[st.scenario], cap), utterance


def spoken_to_bits(addressees: Sequence[str], members: Sequence[str], group_label: str, cap: int) -> int:
    """Whom a row addressed, as bits: bit ``i`` member slot ``i``, bit ``cap`` the therapist,
    bit ``cap + 1`` the whole group (names outside these are ignored)."""
    bits = 0
    for name in addressees:
        if name in members:
            bits |= 1 << members.index(name)
        elif name == THERAPIST:
            bits |= 1 << cap
        elif name == group_label:
            bits |= 1 << (cap + 1)
    return bits


def spoken_to_names(bits: int, members: Sequence[str], group_label: str, cap: int) -> tuple[str, ...]:
    """The names of :func:`spoken_to_bits`' ``bits`` (members in slot order, the therapist,
    the group)."""
    names = [m for i, m in enumerate(members) if bits >> i & 1]
    if bits >> cap & 1:
        names.append(THERAPIST)
    if bits >> (cap + 1) & 1:
        names.append(group_label)
    return tuple(names)


def _put_start(a: Starts, s: int, st: GroupState, pattern: int) -> None:
    """Row ``s`` of the start arrays ``a`` from the state ``st`` (``pattern``: its index)."""
    n = st.n
    a.n[s], a.pattern[s], a.row[s] = n, pattern, st.row_index
    a.client[s], a.spoken_to[s], a.utterance[s] = turn_codes(st, a.distress.shape[1])
    a.strategy[s], a.addressed[s] = move_codes(st)
    a.distress[s, :n] = st.distress
    a.stance[s, :n, :n] = st.stance
    a.untended[s, :n] = st.untended


#: fatigue ** streak for streaks up to this length (longer streaks use the last value, ~0)
_MAX_STREAK = 64
_NO_INTS = np.zeros(0, np.int64)


def _int_vector(a: Any, name: str, length: int | None = None) -> np.ndarray:
    """``a`` as a C-contiguous ``int64`` vector (no copy when it is one), of ``length`` when
    given: the only kind of per-call array the kernel is compiled for."""
    v = np.ascontiguousarray(a, np.int64)
    if v.ndim != 1 or (length is not None and v.shape[0] != length):
        raise ValueError(f"{name} must be a vector of {length if length is not None else 'n'} integers, got shape {v.shape}")
    return v


def _action_tables(encoding: ActionEncoding) -> tuple[np.ndarray, ...]:
    """The flat actions decoded (intervene, target, strategy) and the targets' member slots
    and validity by group size."""
    A, T_, cap = encoding.n_actions, encoding.n_targets, encoding.max_members
    act_intervene, act_target, act_strategy = np.zeros(A, np.bool_), np.zeros(A, np.int64), np.zeros(A, np.int64)
    for a in range(1, A):
        dec = encoding.decode(a)
        act_intervene[a], act_target[a], act_strategy[a] = True, dec.target, dec.strategy
    target_slots = np.zeros((cap + 1, T_, cap), np.bool_)
    target_valid = np.zeros((cap + 1, T_), np.bool_)
    for n in range(1, cap + 1):
        target_valid[n] = encoding.target_mask(n).astype(bool)
        for t in range(T_):
            for i in encoding.target_slots(t, n):
                target_slots[n, t, i] = True
    return act_intervene, act_target, act_strategy, target_slots, target_valid


def _model_tables(sp: ScenarioParams, encoding: ActionEncoding) -> Tables:
    """The compiled model's tables of ``sp`` (scalar settings in ``params``: set by the Core)."""
    P = np.zeros(N_PARAMS)
    P[P_DYAD_SHARE], P[P_GROUP_SHARE] = sp.dyad_share, sp.group_share
    P[P_GROWTH], P[P_SIDELINE], P[P_CONTAGION] = sp.untended_growth, sp.sideline_penalty, sp.contagion
    P[P_D_NOISE], P[P_S_NOISE] = sp.distress_noise, sp.stance_noise
    P[P_SPEAK_ADDRESSED], P[P_SPEAK_DISTRESS], P[P_ANSWER] = sp.speak_addressed, sp.speak_distress, sp.answer_therapist
    P[P_FATIGUE] = sp.fatigue
    P[P_REACTIVITY_SD], P[P_VOLATILITY_SD], P[P_SUSCEPTIBILITY_SD] = sp.reactivity_sd, sp.volatility_sd, sp.susceptibility_sd
    P[P_READING_NOISE] = sp.reading_noise
    P[P_BASELINE_SD], P[P_WARMTH_SD] = sp.baseline_sd, sp.warmth_sd
    kinds = np.zeros(len(UTTERANCE_TYPES), np.int64)
    for name in ("accusation", "defense", "withdrawal"):
        kinds[UTTERANCE_TYPES.index(name)] = _KIND_NEGATIVE
    for name in ("repair", "validation"):
        kinds[UTTERANCE_TYPES.index(name)] = _KIND_POSITIVE
    f64 = lambda x: np.ascontiguousarray(x, np.float64)  # noqa: E731
    _rows = lambda x: f64(x).reshape(-1, x.shape[-1])  # noqa: E731
    return Tables(
        *_action_tables(encoding), P, f64(sp.effect), f64(sp.effect_sd), f64(sp.soften), f64(sp.pattern_pressure),
        f64(sp.second_turn), f64(np.cumsum(sp.utterance, axis=1)), kinds, f64(sp.utterance_effect), f64(sp.harden),
        _rows(np.cumsum(sp.transition, axis=2)), np.array([sp.fatigue**k for k in range(_MAX_STREAK)]),
    )  # fmt: skip


def _new_state(N: int, cap: int, obs_dim: int) -> State:
    """The arrays of N sessions, padded to ``cap`` (every client neutral until a reset)."""
    i64 = lambda *shape: np.zeros(shape, np.int64)  # noqa: E731
    f64 = lambda *shape: np.zeros(shape)  # noqa: E731
    traits = np.zeros((N, cap, TR_WARMTH + cap))
    traits[:, :, :TR_BASELINE] = 1.0
    return State(
        n=i64(N), distress=f64(N, cap), stance=f64(N, cap, cap), pattern=i64(N), untended=i64(N, cap), traits=traits,
        key=np.zeros(N, np.uint64), t=i64(N), streak=i64(N), interventions=i64(N), invalid=i64(N), settled=i64(N),
        row=i64(N), start=i64(N), last_speaker=i64(N),
        last_client=np.full(N, NOBODY, np.int64), last_spoken_to=i64(N), last_utterance=np.full(N, NOBODY, np.int64),
        last_strategy=np.full(N, NOBODY, np.int64), last_addressed=i64(N),
        untended_turns=i64(N, cap), sigma_return=f64(N), discount=f64(N), sigma=f64(N, 4), peak=f64(N),
        n_turns=i64(N), turn_slot=i64(N, cap + 2), turn_type=i64(N, cap + 2), turn_addressee=i64(N, cap + 2),
        intervened=np.zeros(N, np.bool_), step_invalid=np.zeros(N, np.bool_), step_sigma=f64(N, 4),
        behaviour_type=np.full((N, cap), FREE, np.int64), behaviour_addressee=i64(N, cap),
        obs=np.zeros((N, obs_dim), np.float32), rewards=f64(N), terminated=np.zeros(N, np.bool_), truncated=np.zeros(N, np.bool_),
    )  # fmt: skip


def _new_final(S: State) -> Final:
    return Final(*(np.zeros_like(getattr(S, name)) for name in Final._fields))


class Core:
    """The state of ``num_sessions`` sessions and the compiled model that moves them.

    Args:
        params: the calibrated parameters of the scenario.
        encoding: the therapist's action encoding (its cap pads the arrays).
        reward: σ*'s weights (:meth:`set_reward` changes them live).
        starts: the start states of the seed dialogues (``None``: sessions are only ever
            :meth:`load`-ed, e.g. to simulate moves from real states).
        num_sessions: N.
        episode_end: the episode-end settings (``horizon``, ``settle_threshold``,
            ``settle_steps``, ``terminate_on_settle``: an :class:`~rescue_env.config.EnvConfig`).
        heterogeneity: spread of the clients drawn at reset (see :meth:`set_heterogeneity`).

    Adapters call :meth:`reset`, then :meth:`step` (or :meth:`transition`, a change of the
    state through :meth:`set_state`, and :meth:`finish`), and read :attr:`obs` (float32,
    ``(N, obs_dim)``), :attr:`rewards`, :attr:`terminated`, :attr:`truncated`,
    :meth:`masks` and the per-session views; :attr:`state` holds every array by name.
    """

    def __init__(self, params: ScenarioParams, encoding: ActionEncoding, reward: RewardConfig, starts: StartTable | None, num_sessions: int, *, episode_end: Any, heterogeneity: float):
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
        self.mask_table = np.zeros((cap + 1, encoding.n_actions), np.bool_)
        self.factored_tables: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for n in range(1, cap + 1):
            self.mask_table[n] = encoding.mask(n).astype(bool)
            self.factored_tables[n] = encoding.factored_mask(n)
        #: the masks as ``int8`` (what infos carry, for ``Discrete.sample(mask=)``)
        self.mask_table_int8 = self.mask_table.astype(np.int8)
        self.tables = _model_tables(params, encoding)
        self.set_heterogeneity(heterogeneity)
        self.set_reward(reward)
        self.set_episode_end(episode_end)
        self.obs_dim = sum(math.prod(shape) for shape in observation_layout(cap, self.n_patterns, encoding.n_strategies).values())
        self.state = _new_state(N, cap, self.obs_dim)
        self.final = _new_final(self.state)
        self.start_arrays = starts.arrays if starts is not None else _empty_starts(1, 1, cap)
        # the kernel's arguments as plain tuples (see _kernel)
        self._args = (tuple(self.state), tuple(self.final), tuple(self.tables), tuple(self.start_arrays), self.n_patterns)
        S = self.state
        self.obs, self.rewards, self.terminated, self.truncated = S.obs, S.rewards, S.terminated, S.truncated
        #: the final observation of episodes that ended in a SAME_STEP call
        self.final_obs = self.final.obs

    #: the kernel's compiled entry, once this process has run it (compiled, or loaded from the
    #: cache). Calling it skips numba's dispatcher, whose typing of the ~80 arrays is about
    #: half of a call's fixed cost (the single env's step pays it each step). It is only ever
    #: handed the one signature's types: the structures are built by this class, and the
    #: per-call arrays are C-contiguous int64 vectors (:func:`_int_vector`).
    _entry: Any = None

    def _run(self, task: int, mode: int = 0, idx: np.ndarray = _NO_INTS, actions: np.ndarray = _NO_INTS, dialogues: np.ndarray = _NO_INTS, rows: np.ndarray = _NO_INTS, streaks: np.ndarray = _NO_INTS, starts: Starts | None = None) -> None:
        s, x, t, st, n_patterns = self._args
        if starts is not None:
            st = tuple(starts)
        if Core._entry is not None:
            Core._entry(task, mode, idx, actions, dialogues, rows, streaks, s, x, t, st, n_patterns)
            return
        with _CompileNotice():  # a cold cache compiles here
            _kernel(task, mode, idx, actions, dialogues, rows, streaks, s, x, t, st, n_patterns)
        signatures = getattr(_kernel, "signatures", ())  # none under NUMBA_DISABLE_JIT: keep calling it
        if len(signatures) == 1:
            # numba's compiled-overload record; a numba without it keeps the dispatcher
            overload = getattr(_kernel, "overloads", {}).get(signatures[0])
            Core._entry = getattr(overload, "entry_point", None)

    # settings ---------------------------------------------------------------------------------
    def set_reward(self, reward: RewardConfig) -> None:
        """Use ``reward``'s weights from the next step on."""
        if not isinstance(reward, RewardConfig):
            raise TypeError(f"reward_cfg must be a RewardConfig, got {type(reward).__name__}")
        P = self.tables.params
        P[P_W_MEAN], P[P_BETA], P[P_LAM], P[P_COST], P[P_GAMMA] = reward.w_mean, reward.beta, reward.lam, reward.cost, reward.gamma
        self.reward = reward

    def set_heterogeneity(self, heterogeneity: float) -> None:
        """Spread of the clients drawn at the next resets: 0 = every client is the mean
        client, 1 = the fitted population spread, > 1 wider (domain randomisation)."""
        self.tables.params[P_HETEROGENEITY] = self.heterogeneity = check_heterogeneity(heterogeneity)

    def set_reading_noise(self, sd: float) -> None:
        """The observation model's reading noise (sd around latent distress; 0: the policy sees
        the latent distress). Client models that report their own emotions (LLM clients: their
        self-report is the reading) switch it off."""
        self.tables.params[P_READING_NOISE] = float(sd)

    def set_episode_end(self, episode_end: Any) -> None:
        """Use ``episode_end``'s ``horizon``, ``settle_threshold``, ``settle_steps`` and
        ``terminate_on_settle`` (an :class:`~rescue_env.config.EnvConfig`) from the next step on."""
        c = episode_end
        P = self.tables.params
        P[P_HORIZON], P[P_SETTLE_THRESHOLD], P[P_SETTLE_STEPS], P[P_TERMINATE] = c.horizon, c.settle_threshold, c.settle_steps, float(c.terminate_on_settle)

    @property
    def horizon(self) -> int:
        return int(self.tables.params[P_HORIZON])

    # episodes ---------------------------------------------------------------------------------
    def reset(self, idx: Sequence[int] | np.ndarray, keys: Sequence[int] | np.ndarray, dialogues: Sequence[int] | None = None, rows: Sequence[int] | None = None) -> None:
        """Start new episodes of sessions ``idx`` with episode ``keys``; ``dialogues`` /
        ``rows`` fix a session's seed dialogue (index) / cut row (``-1``: drawn)."""
        if self.starts is None:
            raise RuntimeError("this core has no start states (starts=None): put states in with load()")
        idx = _int_vector(idx, "idx")
        self.state.key[idx] = np.asarray(keys, np.uint64)
        dl = np.full(len(idx), -1, np.int64) if dialogues is None else _int_vector(dialogues, "dialogues", len(idx))
        rw = np.full(len(idx), -1, np.int64) if rows is None else _int_vector(rows, "rows", len(idx))
        for k in range(len(idx)):
            if rw[k] >= 0 and dl[k] >= 0 and rw[k] > self.starts.rows_of(int(dl[k])):
                d = self.starts.dialogues[dl[k]]
                raise ValueError(f"start_row={rw[k]} outside 0..{len(d.rows)} for {d.sample_id!r}")
        self._run(_RESET, idx=idx, dialogues=dl, rows=rw, streaks=np.zeros(len(idx), np.int64))

    def load(self, e: int, state: GroupState, *, key: int, streak: int = 0) -> None:
        """Put an arbitrary state (e.g. one extracted from a real dialogue) in session ``e``
        with episode key ``key`` (its clients' traits are drawn from the key): the fidelity
        check simulates moves from real states."""
        n = state.n
        if not 1 <= n <= self.cap:
            raise ValueError(f"a group of {n} does not fit the cap {self.cap}")
        one = _empty_starts(1, 1, self.cap)
        one.count[0] = 1
        _put_start(one, 0, state, self.params.pattern_index(state.pattern))
        one.row[0] = 0
        self.state.key[e] = np.uint64(key)
        zero = np.zeros(1, np.int64)
        self._run(_LOAD, idx=np.array([e], np.int64), dialogues=zero, rows=zero, streaks=np.array([streak], np.int64), starts=one)

    def step(self, actions: np.ndarray, mode: int = NO_AUTORESET) -> None:
        """Step every session with ``actions`` (``int64[N]``, checked by the caller) in
        autoreset ``mode`` (:data:`NO_AUTORESET`, :data:`SAME_STEP`, :data:`NEXT_STEP`; see
        :func:`_step`)."""
        self._run(_STEP, mode, actions=_int_vector(actions, "actions", self.num_sessions))

    def transition(self, actions: np.ndarray) -> None:
        """The calibrated transition only (then :meth:`finish`): for client models that
        change the state it reached (LLM clients) before σ* is booked."""
        self._run(_TRANSITION, actions=_int_vector(actions, "actions", self.num_sessions))

    def finish(self) -> None:
        """σ*, the book, episode end and observations of the state every session reached."""
        self._run(_FINISH)

    def set_behaviours(self, e: int, behaviours: dict[int, Any]) -> None:
        """Client agents' turns of session ``e``'s next steps: ``{slot: Behaviour}`` speaks
        (its ``utterance_type`` index and ``addressee``), ``{slot: None}`` is silent; other
        slots are the model's. :meth:`clear_behaviours` hands every slot back."""
        self.clear_behaviours(e)
        for i, b in behaviours.items():
            self.state.behaviour_type[e, i] = SILENT if b is None else b.utterance_type
            self.state.behaviour_addressee[e, i] = 0 if b is None else b.addressee

    def clear_behaviours(self, e: int) -> None:
        """Every client slot of session ``e`` is the model's again."""
        self.state.behaviour_type[e, :] = FREE

    @contextmanager
    def behaving(self, e: int, behaviours: dict[int, Any] | None) -> Iterator[None]:
        """Client agents' ``behaviours`` (as :meth:`set_behaviours`) for the calls in the
        ``with`` block, every slot the model's again after it; ``None`` or ``{}``: no change."""
        if behaviours:
            self.set_behaviours(e, behaviours)
        try:
            yield
        finally:
            if behaviours:
                self.clear_behaviours(e)

    def set_state(self, e: int, *, distress: np.ndarray | None = None, stance: np.ndarray | None = None, pattern: str | None | int = -1) -> None:
        """Overwrite session ``e``'s distress (clipped to [0, 1]), stances (clipped to
        [−1, 1], diagonal 0) and/or pattern (a label or ``None``; ``-1``: unchanged)."""
        S = self.state
        n = int(S.n[e])
        if distress is not None:
            S.distress[e, :n] = np.clip(distress, 0.0, 1.0)
        if stance is not None:
            g = np.clip(np.asarray(stance, float), -1.0, 1.0)
            np.fill_diagonal(g, 0.0)
            S.stance[e, :n, :n] = g
        if pattern != -1:
            S.pattern[e] = self.params.pattern_index(pattern)  # type: ignore[arg-type]

    def set_turns(self, e: int, turns: Sequence[tuple[int, int, int]]) -> None:
        """Replace session ``e``'s client turns of the step (slot, utterance type, addressee),
        e.g. with the ones LLM clients took; the row count and last speaker follow."""
        S = self.state
        S.row[e] += len(turns) - int(S.n_turns[e])
        for j, (slot, utype, addressee) in enumerate(turns):
            S.turn_slot[e, j], S.turn_type[e, j], S.turn_addressee[e, j] = slot, utype, addressee
        S.n_turns[e] = len(turns)
        if turns:
            slot, utype, addressee = turns[-1]
            S.last_speaker[e] = S.last_client[e] = slot
            S.last_spoken_to[e], S.last_utterance[e] = _spoken_to_bit(addressee, self.cap), utype

    def step_seed(self, e: int) -> int:
        """A 31-bit seed for session ``e``'s current step drawn from its key (LLM calls)."""
        return int(_bits(self.state.key[e], int(self.state.t[e]), _U_LLM_SEED)) % (2**31 - 1)

    def next_episode_key(self, e: int) -> int:
        """The key session ``e``'s next episode gets when it is not seeded."""
        return int(next_key(self.state.key[e]))

    # views --------------------------------------------------------------------------------------
    def masks(self) -> np.ndarray:
        """``(N, n_actions)`` boolean masks of the sessions' current groups."""
        return np.take(self.mask_table, self.state.n, axis=0)  # take: faster than fancy indexing

    def masks_int8(self) -> np.ndarray:
        """:meth:`masks` as ``int8`` (what infos carry, for ``Discrete.sample(mask=)``)."""
        return np.take(self.mask_table_int8, self.state.n, axis=0)

    def factored_masks(self, e: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(intervene, target, strategy)`` masks of session ``e``'s group (copies)."""
        return tuple(m.copy() for m in self.factored_tables[int(self.state.n[e])])  # type: ignore[return-value]

    def group_size(self, e: int) -> int:
        """Session ``e``'s number of members."""
        return int(self.state.n[e])

    def steps(self, e: int) -> int:
        """Steps session ``e``'s episode has played."""
        return int(self.state.t[e])

    def step_flags(self, e: int) -> tuple[bool, bool]:
        """Whether session ``e``'s last step intervened, and whether its action was masked."""
        return bool(self.state.intervened[e]), bool(self.state.step_invalid[e])

    def turns(self, e: int) -> list[tuple[int, int, int]]:
        """Session ``e``'s client turns of the last step: (slot, utterance type, addressee)."""
        S = self.state
        k = int(S.n_turns[e])
        return list(zip(S.turn_slot[e, :k].tolist(), S.turn_type[e, :k].tolist(), S.turn_addressee[e, :k].tolist()))

    def pattern_of(self, e: int) -> str | None:
        p = int(self.state.pattern[e])
        return self.patterns[p] if p < self.n_patterns else None

    def step_components(self, e: int) -> dict[str, float]:
        """The last step's weighted σ* components of session ``e`` (they sum to its reward)."""
        return dict(zip(COMPONENTS, self.state.step_sigma[e].tolist()))

    def traits(self, e: int) -> dict[str, np.ndarray]:
        """Session ``e``'s clients' latent traits (per member slot): ``reactivity``,
        ``volatility``, ``susceptibility`` (multipliers, 1 for the mean client), ``baseline``
        (offset of their distress from the seed person's at reset, 0 for the mean client) and
        ``warmth`` (``[n, n]``: row i, column j the per-step stance drift of i toward j, 0 for
        the mean dyad)."""
        n = int(self.state.n[e])
        tr = self.state.traits[e]
        out = {name: tr[:n, k].copy() for k, name in enumerate(_TRAIT_NAMES)}
        out["warmth"] = tr[:n, TR_WARMTH : TR_WARMTH + n].copy()
        return out

    def episode_arrays(self) -> dict[str, np.ndarray]:
        """Every session's episode figures as arrays: ``sigma_return``, ``episode_steps``,
        ``peak_max_distress``, ``interventions``, ``invalid_actions`` (views: copy to keep)."""
        S = self.state
        return {"sigma_return": S.sigma_return, "episode_steps": S.t, "peak_max_distress": S.peak, "interventions": S.interventions, "invalid_actions": S.invalid}

    def stats(self, e: int, *, final: bool = False) -> dict[str, Any]:
        """Session ``e``'s episode figures (``final``: of the episode that ended at the last
        :data:`SAME_STEP` call, whose session has already restarted)."""
        S: State | Final = self.final if final else self.state
        n = int(S.n[e])
        k, cut = self.starts.origin[int(S.start[e])]  # type: ignore[union-attr]
        members = self.starts.members[k]  # type: ignore[union-attr]
        d = S.distress[e, :n]
        return {
            "steps": int(S.t[e]),
            "sigma_return": float(S.sigma_return[e]),
            "sigma": dict(zip(COMPONENTS, S.sigma[e].tolist())),
            "final_max_distress": float(d.max()),
            "final_mean_distress": float(d.sum() / n),
            "peak_max_distress": float(S.peak[e]),
            "untended_turns": {m: int(x) for m, x in zip(members, S.untended_turns[e, :n].tolist())},
            "interventions": int(S.interventions[e]),
            "invalid_actions": int(S.invalid[e]),
            "seed_dialogue": self.starts.dialogues[k].sample_id,  # type: ignore[union-attr]
            "start_row": cut,
        }

    def start_of(self, e: int) -> tuple[Dialogue, int, tuple[str, ...], GroupState]:
        """Session ``e``'s seed dialogue, cut row, members and start-state snapshot."""
        s = int(self.state.start[e])
        k, cut = self.starts.origin[s]  # type: ignore[union-attr]
        return self.starts.dialogues[k], cut, self.starts.members[k], self.starts.snapshots[s]  # type: ignore[union-attr]

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
        S = self.state
        st.distress = S.distress[e, :n].copy()
        st.stance = S.stance[e, :n, :n].copy()
        st.untended = S.untended[e, :n].copy()
        st.pattern = self.pattern_of(e)
        if S.t[e]:
            st.row_index = int(S.row[e])
        if S.last_speaker[e] != KEEP:
            st.last_speaker = st.members[int(S.last_speaker[e])]
        if S.t[e]:  # the turn the therapist answers now (a start keeps its seed rows' turn)
            client, utterance = int(S.last_client[e]), int(S.last_utterance[e])
            st.last_client = st.members[client] if client != NOBODY else None
            st.last_addressee = spoken_to_names(int(S.last_spoken_to[e]), st.members, GROUP_LABELS[st.scenario], self.cap)
            st.last_utterance_type = UTTERANCE_TYPES[utterance] if utterance != NOBODY else ""
        if S.t[e] and S.last_strategy[e] != NOBODY:  # a start (or a strategy outside the taxonomy) keeps the seed rows' move
            st.last_strategy = self.encoding.strategy_names[int(S.last_strategy[e])]
            bits = int(S.last_addressed[e])
            st.last_target = tuple(m for i, m in enumerate(st.members) if bits >> i & 1)
