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

from rescue_env.dynamics.params import DynamicsParams, ScenarioParams, scenario_params

__all__ = ["DynamicsParams", "ScenarioParams", "scenario_params"]
