"""The calibrated client backend: a fast stochastic model of how a group responds.

One step, in order (parameters in :class:`~rescue_env.dynamics.params.ScenarioParams`):

1. **Therapist effect.** Each addressed member's distress moves by ``effect[ρ, a]``
   (scaled by ``dyad_share`` / ``group_share`` when the move is spread over several people
   and by ``fatigue ** streak`` when the therapist keeps talking); their stances soften by
   ``soften[a]``. If the most distressed member is not addressed they feel sidelined
   (``sideline_penalty``).
2. **Bucket effect.** Members not addressed see their distress grow by
   ``untended_growth`` of itself; everyone drifts by ``pattern_pressure[ρ]``.
3. **Client turns.** One client speaks, a second with ``second_turn[ρ]``; speakers are drawn
   by a softmax over being addressed and own distress; utterance types from
   ``utterance[ρ]``. A client answers the therapist or turns to another member: toward the
   one they regard worst for accusations, defences and withdrawals, best for repair and
   validation. What they say moves the addressee's distress and stance
   (``utterance_effect``).
4. **Ripple effect.** Distress flows from more to less distressed members along hostile
   edges of G (rate ``contagion`` times the edge's mutual hostility); warm edges carry none.
5. **Stances** harden (or warm) by ``harden[ρ]``; noise is added to distress and stances.
6. **Pattern.** ρ_{t+1} is drawn from ``transition[action, ρ_t]``.

All randomness comes from the generator passed in, so equal seeds give equal episodes.
"""

from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np

from rescue_env.dynamics.base import TO_THERAPIST, Behaviour, ClientTurn, TherapistMove
from rescue_env.dynamics.params import DynamicsParams, ScenarioParams
from rescue_env.state import GroupState
from rescue_env.taxonomy.labels import UTTERANCE_TYPES

_NEGATIVE_UTTERANCES = frozenset(UTTERANCE_TYPES.index(u) for u in ("accusation", "defense", "withdrawal"))
_POSITIVE_UTTERANCES = frozenset(UTTERANCE_TYPES.index(u) for u in ("repair", "validation"))


class CalibratedBackend:
    """Client model with parameters fitted by :mod:`rescue_env.dynamics.fit`.

    Args:
        scenario: ``"couple"`` or ``"family"``.
        params: fitted parameters (a :class:`DynamicsParams`, a :class:`ScenarioParams`,
            or a path to a parameter JSON); the packaged defaults when ``None``.
    """

    name = "calibrated"

    def __init__(self, scenario: str, params: DynamicsParams | ScenarioParams | str | None = None):
        if isinstance(params, ScenarioParams):
            sp = params
        else:
            dp = params if isinstance(params, DynamicsParams) else DynamicsParams.load(params)
            sp = dp[scenario]
        if sp.scenario != scenario:
            raise ValueError(f"parameters are for {sp.scenario!r}, backend is for {scenario!r}")
        self.scenario = scenario
        self.params = sp
        self._pattern_index = {p: i for i, p in enumerate(sp.patterns)}
        self._none = len(sp.patterns)
        # cumulative tables for inverse-CDF sampling (cheaper than Generator.choice per step)
        self._cum_transition = np.cumsum(sp.transition, axis=2).tolist()
        self._cum_utterance = np.cumsum(sp.utterance, axis=1).tolist()
        self._lists = {
            name: (v.tolist() if isinstance(v, np.ndarray) else v)
            for name, v in vars(sp).items()
            if isinstance(v, (np.ndarray, float, int)) and not isinstance(v, bool)
        }

    def pattern_index(self, pattern: str | None) -> int:
        return self._pattern_index.get(pattern, self._none) if pattern else self._none

    # --------------------------------------------------------------------------------------
    def _choose_turns(self, d: list[float], g: list[list[float]], u: list[float], p: int, addressed: list[bool]) -> list[tuple[int, int, int]]:
        """Who speaks, with which utterance type, to whom; ``u`` holds 4 + n uniforms."""
        sp = self._lists
        n = len(d)
        n_turns = 1 + int(n > 1 and u[0] < sp["second_turn"][p])
        # Gumbel-max: the top-k of logits + Gumbel noise is a draw without replacement
        a_w, d_w = sp["speak_addressed"], sp["speak_distress"]
        keys = [a_w * addressed[i] + d_w * d[i] - math.log(-math.log(u[4 + i] or 1e-12)) for i in range(n)]
        speakers = sorted(range(n), key=keys.__getitem__, reverse=True)[:n_turns]
        cum_u = self._cum_utterance[p]
        turns = []
        for k, slot in enumerate(speakers):
            utype = min(bisect_right(cum_u, u[1 + k] * cum_u[-1]), len(UTTERANCE_TYPES) - 1)
            addressee = TO_THERAPIST
            if n > 1 and not (addressed[slot] and u[3] < sp["answer_therapist"]):
                others = [j for j in range(n) if j != slot]
                row = g[slot]
                if utype in _NEGATIVE_UTTERANCES:
                    addressee = min(others, key=row.__getitem__)
                elif utype in _POSITIVE_UTTERANCES:
                    addressee = max(others, key=row.__getitem__)
                elif not addressed[slot]:
                    # small talk goes to whoever the speaker feels most neutral about
                    addressee = min(others, key=lambda j: abs(row[j]))
            turns.append((slot, utype, addressee))
        return turns

    # --------------------------------------------------------------------------------------
    def step(
        self,
        state: GroupState,
        move: TherapistMove,
        rng: np.random.Generator,
        *,
        streak: int = 0,
        behaviours: dict[int, Behaviour | None] | None = None,
    ) -> list[ClientTurn]:
        # Plain-float arithmetic on lists: for groups of 2-6 it is several times faster than
        # numpy calls on tiny arrays, and env.step speed is what RL training waits on.
        sp = self._lists
        n = state.n
        d = state.distress.tolist()
        g = state.stance.tolist()
        p = self.pattern_index(state.pattern)
        addressed = [False] * n
        if move.intervene:
            for i in move.slots:
                addressed[i] = True

        # 1. therapist effect
        mult = sp["fatigue"] ** streak if move.intervene else 0.0
        if move.intervene:
            s = int(move.strategy)  # type: ignore[arg-type]
            k = len(move.slots)
            share = 1.0 if k == 1 else (sp["group_share"] if k >= n else sp["dyad_share"])
            worst = d.index(max(d))
            eff = sp["effect"][p][s] * mult * share
            soft = sp["soften"][s] * mult * share
            for i in move.slots:
                d[i] += eff
                gi = g[i]
                for j in range(n):
                    gi[j] += soft * (1.0 - gi[j])
            if not addressed[worst]:
                d[worst] += sp["sideline_penalty"]
        # 2. bucket effect: untended distress feeds on itself; the pattern presses on everyone
        grow = 1.0 + sp["untended_growth"]
        pressure = sp["pattern_pressure"][p]
        for i in range(n):
            d[i] = (d[i] if addressed[i] else d[i] * grow) + pressure

        # 3. client turns
        # user-driven clients (multi-agent view) say what they chose; the others follow the model
        # one draw of every uniform the step needs: 4 + n for the turns, 2 for the pattern
        u = rng.random(6 + n).tolist()
        chosen = self._choose_turns(d, g, u, p, addressed)
        if behaviours is not None:
            chosen = [(slot, b.utterance_type, b.addressee) for slot, b in sorted(behaviours.items()) if b is not None] + [
                t for t in chosen if t[0] not in behaviours
            ]
        ueff = sp["utterance_effect"]
        turns = []
        for slot, utype, addressee in chosen:
            dd, dg = ueff[utype]
            if addressee >= 0 and addressee != slot:
                d[addressee] += dd
                g[addressee][slot] += dg
            elif addressee < TO_THERAPIST:  # the whole group hears it, at half strength
                for j in range(n):
                    if j != slot:
                        d[j] += 0.5 * dd
                        g[j][slot] += 0.5 * dg
            turns.append(ClientTurn(slot, UTTERANCE_TYPES[utype], addressee))

        # 4. ripple: distress flows along hostile edges toward the less distressed
        if n > 1:
            c = sp["contagion"] / (n - 1)
            inflow = [0.0] * n
            for i in range(n):
                for j in range(n):
                    if j != i and d[j] > d[i]:
                        hostility = -0.5 * (g[i][j] + g[j][i])
                        if hostility > 0:
                            inflow[i] += hostility * (d[j] - d[i])
            for i in range(n):
                d[i] += c * inflow[i]

        # 5. stance drift and noise, clipped
        h = sp["harden"][p]
        toward, rate = (-1.0, h) if h >= 0 else (1.0, -h)
        noise = rng.standard_normal(n + n * n).tolist()
        dn, sn = sp["distress_noise"], sp["stance_noise"]
        for i in range(n):
            x = d[i] + dn * noise[i]
            d[i] = 0.0 if x < 0.0 else 1.0 if x > 1.0 else x
            gi = g[i]
            base = n + i * n
            for j in range(n):
                if j == i:
                    gi[j] = 0.0
                    continue
                y = gi[j] + rate * (toward - gi[j]) + sn * noise[base + j]
                gi[j] = -1.0 if y < -1.0 else 1.0 if y > 1.0 else y
        # fresh arrays from the lists (cheaper than writing a list into an existing array)
        state.distress = np.array(d)
        state.stance = np.array(g)

        # 6. pattern transition (the move's pull fades with fatigue, like its effect)
        u0, u1 = u[4 + n], u[5 + n]
        action = 1 + int(move.strategy) if move.intervene and u0 < mult else 0  # type: ignore[arg-type]
        cum = self._cum_transition[action][p]
        nxt = bisect_right(cum, u1 * cum[-1])
        nxt = min(nxt, self._none)
        state.pattern = self.params.patterns[nxt] if nxt < self._none else None
        return turns
