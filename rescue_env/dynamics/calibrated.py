"""The calibrated client model: a fast stochastic model of how a group responds.

This module states the model; its arithmetic lives once, compiled and batched, in the
simulator core (:func:`rescue_env.core._transition`), which every env runs: one helper per part
below (``_therapist_effect``, ``_bucket``, ``_choose_turns`` and ``_hear_turns``, ``_ripple``,
``_stance_drift``, ``_next_pattern``, ``_untended`` and ``_book``), then σ*
(``_sigma_star``) and the observation model (``_observe_row``).

One step, in order (parameters in :class:`~rescue_env.dynamics.params.ScenarioParams`):

1. **Therapist effect.** Each addressed member's distress moves by ``effect[ρ, a]``
   (scaled by ``dyad_share`` / ``group_share`` when the move is spread over several people
   and by ``fatigue ** streak`` when the therapist keeps talking) plus the move's own spread,
   a normal of sd ``effect_sd[ρ, a]`` drawn per member and move (scaled by the fatigue, not
   the share: it is one person's response); the sum is multiplied by the client's reactivity.
   Their stances soften by ``soften[a]``. If the most distressed member is not addressed they
   feel sidelined (``sideline_penalty``).
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
5. **Stances** harden (or warm) by ``harden[ρ]`` and drift by their dyad's warmth
   ``w_ij``; noise is added to distress and stances.
6. **Pattern.** ρ_{t+1} is drawn from ``transition[action, ρ_t]`` (the move's row with
   probability ``fatigue ** streak``, else the listening row). Each row is a stay
   probability — a pattern lasts a geometric number of steps, mean ``1 / (1 − stay)`` (its
   dwell) — and a distribution over where it goes when it changes; both are fitted per
   pattern from every move out of it and per move on top (:func:`~rescue_env.dynamics.fit.transition_table`).

**Heterogeneous clients.** Each client ``i`` of a session carries latent traits drawn at
reset from the fitted population (``z`` independent standard normals from the episode key,
``h`` = ``dynamics.heterogeneity``; a person seen in several sessions of one couple counts as
one client in the fit): reactivity ``r_i = 1 + h·reactivity_sd·z`` multiplies the
therapist effects they receive (``r_i < 0``: the move backfires), volatility
``v_i = exp(h·volatility_sd·z)`` scales their distress noise and reading noise, contagion
susceptibility ``k_i = exp(h·susceptibility_sd·z)`` scales the ripple they take in, and
baseline distress ``b_i = h·baseline_sd·z`` sets where their distress sits: a reset starts
them at the seed person's distress plus ``b_i`` (clipped to [0, 1]). The model has no pull
toward a set point (untended distress grows, patterns press), so that offset lasts the
episode; a state loaded from a real dialogue (:meth:`~rescue_env.core.Core.load`, the
fidelity check) is a real person's and is not moved. Each ordered pair ``i → j`` carries a
warmth ``w_ij = h·warmth_sd·z`` (drawn independently for ``j → i``): ``i``'s stance toward
``j`` drifts by ``w_ij`` every step on top of the pattern's pull, so a warm dyad settles
above the pattern's stance level and a cold one below. ``h = 0`` gives every client the mean
client's traits (multipliers 1, baseline and warmth 0). All are exposed by
:meth:`~rescue_env.core.Core.traits`.

How the two spreads are fitted (:func:`~rescue_env.dynamics.fit.fit_random_offsets`, a
random-intercept model by MAP with log-normal priors, :class:`~rescue_env.dynamics.fit.PopulationPrior`):
``baseline_sd`` is the between-client sd of every annotated distress reading, a person seen
in several sessions being one client (the within-client spread, reading noise and swings,
is separated out); ``warmth_sd`` is the between-dyad sd of the per-step drift of annotated
stances (changes between consecutive annotations of a pair as a random walk with drift,
minus the pattern's pull, the stance before as a covariate). Caveats: the data's stances are
not annotated numbers but the valence of the annotators' attitude/viewpoint text
(:func:`~rescue_env.state.stance_of`), partly shaped by what kind of utterance was made; the
stance changes are noisy (sd ≈ 0.3 per step) against a drift of a few hundredths, so
``warmth_sd`` is weakly identified and sits near its prior median (0.02); the family
``baseline_sd`` is likewise pulled toward its prior (15 clients), the couple one is set by
the data. A drawn client's start is the seed person's distress plus ``b_i``, so starts
spread by ``baseline_sd`` more than the seeds do.

**Spread of a move's outcome**, as fitted (:mod:`rescue_env.dynamics.fit`): the client's
lasting offset (reactivity), the latent drift per step (``distress_noise``, step 5: what
accumulates), the reading noise (what does not), and the (pattern, strategy) cell's own
spread ``effect_sd`` beyond those, estimated per cell by empirical Bayes (scaled-inverse-χ²
shrinkage toward the pooled cell variance, its strength fitted by marginal likelihood); a
cell no noisier than the pool gets 0. Drift and reading noise are split by the variogram of
annotated readings (:func:`~rescue_env.dynamics.fit.fit_reading_variogram`: the mean squared
change between two readings grows with their distance in steps by the drift). On the real
slices the couples' readings do not drift (their variogram is flat: a couple's distress
swings around a level within a session, ``distress_noise`` 0), the families' do (about 0.07
per step).

**Means matched by simulation.** The fitted effect of a strategy is the data's mean change
of the addressed member, but a step adds other terms to that member's change (the pattern's
pressure, the sidelined worst-off member, the clients' turns, the ripple, clipping at 0)
that offset it. On the real slices the largest is the clipping: many annotated members sit
at or near 0 distress, and a noisy reading of a calm member (sd ≈ 0.3) clipped at 0 reads
higher than the member is, so a calming move's simulated mean came out near 0 (families,
all moves: real −0.055, fitted effect −0.061, simulated +0.001; −0.037 with no noise). So the fit replays the real moves one step from their real states and
shifts each strategy's effect until the simulated mean change is the data's (the method of
simulated moments, :func:`~rescue_env.dynamics.fit.calibrate_by_simulation`); likewise one
scale on the stance dynamics (``harden``, ``soften``, the stance part of
``utterance_effect``, ``stance_noise``) makes the simulated stance drift per step the real one.

**Observation model.** What the policy sees (and annotators record) is a reading
``clip(d_i + reading_noise·v_i·ε)`` of latent distress ``d_i``; σ* is booked on the latent
state (the reward is the group's actual distress, not the noise of one reading).

7. **Bookkeeping.** Steps since each member was addressed, the therapist's streak.

All randomness is counter-based (a hash of the episode key, the step and the draw), so equal
seeds give equal episodes whatever the batch (:mod:`rescue_env.core`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from rescue_env.dynamics.base import Behaviour, ClientTurn, TherapistMove
from rescue_env.dynamics.params import DynamicsParams, ScenarioParams, scenario_params
from rescue_env.state import GroupState
from rescue_env.taxonomy.actions import ActionEncoding
from rescue_env.taxonomy.labels import UTTERANCE_TYPES

if TYPE_CHECKING:
    from rescue_env.session import Session


class CalibratedModel:
    """The calibrated model as a client backend (:class:`~rescue_env.dynamics.base.ClientBackend`:
    the envs' default, whose whole step they run in the core) and applied to a lone
    :class:`~rescue_env.state.GroupState`: the state is loaded into a simulator core, moved by
    the core's transition, and written back, for mechanism checks and the fidelity check
    (simulating real moves from real states).

    Args:
        scenario: ``"couple"`` or ``"family"``.
        params: the parameters (object or file; packaged defaults when ``None``).
        heterogeneity: spread of the clients' traits (``dynamics.heterogeneity``: 0 = the
            mean client, 1 = the fitted spread, > 1 wider).
    """

    def __init__(self, scenario: str, params: DynamicsParams | ScenarioParams | str | None = None, *, heterogeneity: float = 1.0):
        self.scenario = scenario
        self.params = scenario_params(params, scenario)
        self.heterogeneity = float(heterogeneity)
        self._cores: dict[tuple[int, int], Any] = {}

    def encoding(self, n: int) -> ActionEncoding:
        """The action encoding of a group of ``n`` (couples: 2; families: sized to the group)."""
        return ActionEncoding(self.scenario, None if self.scenario == "couple" else max(2, min(n, 8)))

    def _core(self, n: int, sessions: int) -> Any:
        from rescue_env.config import EnvConfig
        from rescue_env.core import Core
        from rescue_env.reward import RewardConfig

        encoding = self.encoding(n)
        key = (encoding.max_members, sessions)
        core = self._cores.get(key)
        if core is None:
            # no episode end: a loaded state is moved one step at a time
            never = EnvConfig(self.scenario, horizon=10**9, settle_threshold=0.0, terminate_on_settle=False)
            core = self._cores[key] = Core(self.params, encoding, RewardConfig(), None, sessions, episode_end=never, heterogeneity=self.heterogeneity)
        return core

    def action(self, move: TherapistMove, n: int) -> int:
        """The flat action of ``move`` for a group of ``n`` (slots beyond a dyad: the group)."""
        if not move.intervene:
            return 0
        encoding = self.encoding(n)
        return encoding.encode(encoding.target_for_slots(move.slots, n), int(move.strategy))  # type: ignore[arg-type]

    def simulate(
        self, state: GroupState, move: TherapistMove, draws: int, rng: np.random.Generator, *, streak: int = 0, observed: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """``draws`` independent next states from ``state`` under ``move``, each by a client
        group drawn from the population: distress ``(draws, n)`` (``observed``: its noisy
        reading, what the policy sees and annotators record; else the latent distress σ*
        uses) and stances ``(draws, n, n)``; ``state`` is left unchanged."""
        n = state.n
        core = self._core(n, draws)
        keys = rng.integers(0, 2**63, size=draws, dtype=np.uint64)
        for e in range(draws):
            core.load(e, state, key=int(keys[e]), streak=streak)
        core.transition(np.full(draws, self.action(move, n), np.int64))
        core.finish()
        distress = core.obs[:, :n].astype(np.float64) if observed else core.state.distress[:, :n].copy()
        return distress, core.state.stance[:, :n, :n].copy()

    name = "calibrated"

    async def arespond(
        self,
        session: Session,
        move: TherapistMove,
        planned: list[ClientTurn],
        *,
        pattern_before: str | None,
        seed: int,
        behaviours: dict[int, Behaviour | None] | None = None,
    ) -> list[ClientTurn]:
        """The :class:`~rescue_env.dynamics.base.ClientBackend` answer: the transition's turns
        and state are the calibrated model's whole answer (the envs fuse both in one kernel
        call; this is the same step for a caller that runs them apart)."""
        return list(planned)

    def step(self, state: GroupState, move: TherapistMove, rng: np.random.Generator, *, streak: int = 0) -> list[ClientTurn]:
        """Move ``state`` one step in place (distress, stances, pattern, untended counts);
        returns the client turns."""
        n = state.n
        core = self._core(n, 1)
        core.load(0, state, key=int(rng.integers(0, 2**63, dtype=np.uint64)), streak=streak)
        core.transition(np.array([self.action(move, n)], np.int64))
        core.write_state(0, state)
        return [ClientTurn(slot, UTTERANCE_TYPES[utype], addressee) for slot, utype, addressee in core.turns(0)]
