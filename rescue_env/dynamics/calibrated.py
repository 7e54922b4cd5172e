"""The calibrated client model: a fast stochastic model of how a group responds.

This module states the model; its arithmetic lives once, compiled and batched, in the
simulator core (:func:`rescue_env.core._transition`), which every env runs.

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

7. **Bookkeeping.** Steps since each member was addressed, the therapist's streak.

All randomness is counter-based (a hash of the episode key, the step and the draw), so equal
seeds give equal episodes whatever the batch (:mod:`rescue_env.core`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rescue_env.dynamics.base import ClientTurn, TherapistMove
from rescue_env.dynamics.params import DynamicsParams, ScenarioParams, scenario_params
from rescue_env.state import GroupState
from rescue_env.taxonomy.actions import ActionEncoding
from rescue_env.taxonomy.labels import UTTERANCE_TYPES


class CalibratedModel:
    """The calibrated model applied to a lone :class:`~rescue_env.state.GroupState`: the state
    is loaded into a simulator core, moved by the core's transition, and written back. For
    mechanism checks and the fidelity check (simulating real moves from real states); the
    envs run the core directly.

    Args:
        scenario: ``"couple"`` or ``"family"``.
        params: the parameters (object or file; packaged defaults when ``None``).
    """

    def __init__(self, scenario: str, params: DynamicsParams | ScenarioParams | str | None = None):
        self.scenario = scenario
        self.params = scenario_params(params, scenario)
        self._cores: dict[tuple[int, int], Any] = {}

    def encoding(self, n: int) -> ActionEncoding:
        """The action encoding of a group of ``n`` (couples: 2; families: sized to the group)."""
        return ActionEncoding(self.scenario, None if self.scenario == "couple" else max(2, min(n, 8)))

    def _core(self, n: int, sessions: int) -> Any:
        from rescue_env.core import Core
        from rescue_env.reward import RewardConfig

        encoding = self.encoding(n)
        key = (encoding.max_members, sessions)
        core = self._cores.get(key)
        if core is None:
            core = self._cores[key] = Core(
                self.params, encoding, RewardConfig(), None, sessions,
                horizon=10**9, settle_threshold=0.0, settle_steps=1, terminate_on_settle=False,
            )  # fmt: skip
        return core

    def action(self, move: TherapistMove, n: int) -> int:
        """The flat action of ``move`` for a group of ``n`` (slots beyond a dyad: the group)."""
        if not move.intervene:
            return 0
        encoding = self.encoding(n)
        return encoding.encode(encoding.target_for_slots(move.slots, n), int(move.strategy))  # type: ignore[arg-type]

    def simulate(self, state: GroupState, move: TherapistMove, draws: int, rng: np.random.Generator, *, streak: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """``draws`` independent next states from ``state`` under ``move``: distress
        ``(draws, n)`` and stances ``(draws, n, n)``; ``state`` is left unchanged."""
        n = state.n
        core = self._core(n, draws)
        keys = rng.integers(0, 2**63, size=draws, dtype=np.uint64)
        for e in range(draws):
            core.load(e, state, key=int(keys[e]), streak=streak)
        core.transition(np.full(draws, self.action(move, n), np.int64))
        return core.D[:, :n].copy(), core.G[:, :n, :n].copy()

    def step(self, state: GroupState, move: TherapistMove, rng: np.random.Generator, *, streak: int = 0) -> list[ClientTurn]:
        """Move ``state`` one step in place (distress, stances, pattern, untended counts);
        returns the client turns."""
        n = state.n
        core = self._core(n, 1)
        core.load(0, state, key=int(rng.integers(0, 2**63, dtype=np.uint64)), streak=streak)
        core.transition(np.array([self.action(move, n)], np.int64))
        core.write_state(0, state)
        return [ClientTurn(slot, UTTERANCE_TYPES[utype], addressee) for slot, utype, addressee in core.turns(0)]
