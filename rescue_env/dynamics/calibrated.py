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
        self._cum_transition = np.cumsum(sp.transition, axis=2)
        self._cum_utterance = np.cumsum(sp.utterance, axis=1)
        self._uscale = sp.utterance_effect

    def pattern_index(self, pattern: str | None) -> int:
        return self._pattern_index.get(pattern, self._none) if pattern else self._none

    # --------------------------------------------------------------------------------------
    def sample_behaviours(self, state: GroupState, move: TherapistMove, rng: np.random.Generator) -> dict[int, Behaviour | None]:
        """The backend's own client policy: who speaks and how, as :class:`Behaviour`s."""
        turns = self._choose_turns(state, move, rng, self.pattern_index(state.pattern), self._addressed(state.n, move))
        out: dict[int, Behaviour | None] = {i: None for i in range(state.n)}
        for slot, u, addressee in turns:
            out[slot] = Behaviour(u, addressee)
        return out

    def _addressed(self, n: int, move: TherapistMove) -> np.ndarray:
        addressed = np.zeros(n, dtype=bool)
        if move.intervene:
            addressed[list(move.slots)] = True
        return addressed

    def _choose_turns(
        self, state: GroupState, move: TherapistMove, rng: np.random.Generator, p: int, addressed: np.ndarray
    ) -> list[tuple[int, int, int]]:
        sp = self.params
        n = state.n
        u = rng.random(4 + n)
        n_turns = 1 + int(n > 1 and u[0] < sp.second_turn[p])
        # Gumbel-max: top-k of logits + Gumbel noise = sampling without replacement
        logits = sp.speak_addressed * addressed + sp.speak_distress * state.distress
        keys = logits - np.log(-np.log(u[4 : 4 + n]))
        speakers = np.argsort(-keys)[:n_turns]
        turns = []
        for k, slot in enumerate(speakers):
            slot = int(slot)
            utype = int(np.searchsorted(self._cum_utterance[p], u[1 + k] * self._cum_utterance[p, -1]))
            utype = min(utype, len(UTTERANCE_TYPES) - 1)
            addressee = TO_THERAPIST
            if n > 1 and not (addressed[slot] and u[3] < sp.answer_therapist):
                row = state.stance[slot].copy()
                row[slot] = np.nan
                if utype in _NEGATIVE_UTTERANCES:
                    addressee = int(np.nanargmin(row))
                elif utype in _POSITIVE_UTTERANCES:
                    addressee = int(np.nanargmax(row))
                elif not addressed[slot]:
                    addressee = int(np.nanargmin(np.abs(row - 0.0)) if n > 2 else 1 - slot)
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
        sp = self.params
        n = state.n
        d = state.distress
        g = state.stance
        p = self.pattern_index(state.pattern)
        addressed = self._addressed(n, move)

        # 1. therapist effect
        mult = sp.fatigue**streak if move.intervene else 0.0
        if move.intervene:
            s = int(move.strategy)  # type: ignore[arg-type]
            k = len(move.slots)
            share = 1.0 if k == 1 else (sp.group_share if k >= n else sp.dyad_share)
            worst = int(np.argmax(d))
            d[addressed] += sp.effect[p, s] * mult * share
            g[addressed] += sp.soften[s] * mult * share * (1.0 - g[addressed])
            if not addressed[worst]:
                d[worst] += sp.sideline_penalty
        # 2. bucket effect: untended distress feeds on itself
        d[~addressed] *= 1.0 + sp.untended_growth
        d += sp.pattern_pressure[p]

        # 3. client turns
        if behaviours is None:
            chosen = self._choose_turns(state, move, rng, p, addressed)
        else:
            chosen = [(slot, b.utterance_type, b.addressee) for slot, b in sorted(behaviours.items()) if b is not None]
        turns = []
        for slot, utype, addressee in chosen:
            if addressee >= 0 and addressee != slot:
                d[addressee] += self._uscale[utype, 0]
                g[addressee, slot] += self._uscale[utype, 1]
            elif addressee < TO_THERAPIST:  # the whole group hears it, at half strength
                others = np.arange(n) != slot
                d[others] += 0.5 * self._uscale[utype, 0]
                g[others, slot] += 0.5 * self._uscale[utype, 1]
            turns.append(ClientTurn(slot, UTTERANCE_TYPES[utype], addressee))

        # 4. ripple: distress flows along hostile edges toward the less distressed
        if n > 1:
            hostility = np.maximum(0.0, -0.5 * (g + g.T))
            gap = np.maximum(0.0, d[None, :] - d[:, None])
            d += sp.contagion * (hostility * gap).sum(axis=1) / (n - 1)

        # 5. stance drift and noise
        h = sp.harden[p]
        if h > 0:
            g += h * (-1.0 - g)
        elif h < 0:
            g += -h * (1.0 - g)
        noise = rng.standard_normal(n + n * n)
        d += sp.distress_noise * noise[:n]
        g += sp.stance_noise * noise[n:].reshape(n, n)
        np.clip(d, 0.0, 1.0, out=d)
        np.clip(g, -1.0, 1.0, out=g)
        np.fill_diagonal(g, 0.0)

        # 6. pattern transition (the move's pull fades with fatigue, like its effect)
        u = rng.random(2)
        action = 1 + int(move.strategy) if move.intervene and u[0] < mult else 0  # type: ignore[arg-type]
        cum = self._cum_transition[action, p]
        nxt = min(int(np.searchsorted(cum, u[1] * cum[-1])), self._none)
        state.pattern = sp.patterns[nxt] if nxt < self._none else None
        return turns
