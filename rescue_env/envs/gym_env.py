"""Gymnasium environment: the therapist's single-agent view of a simulated session."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rescue_env.config import EnvSpec
from rescue_env.data.schema import Row
from rescue_env.dynamics.base import Behaviour, TherapistMove
from rescue_env.envs.common import Simulation, Step, check_action, episode_key, start_options
from rescue_env.reward import RewardConfig
from rescue_env.session import Session
from rescue_env.state import GroupState


class ResetNeeded(RuntimeError):
    """Raised by a step (or a read of the episode) when the env has no live episode: never
    reset, or the episode terminated or was truncated."""


class GroupSupportEnv(gym.Env):
    """The therapist in a simulated couple or family session.

    ## Description
    Each step the therapist decides whether to speak (z_t), whom to address (A_t: one
    member, a dyad, the whole group) and how (strategy a_t); the clients respond through a
    client backend (the calibrated model by default, or LLM personas) and their distress
    s_t, stances G_t and relation pattern ρ_t move. Episodes start from a seed dialogue
    (bundled seeds or ``data_path``) cut at a random row: the state is extracted from the
    rows before the cut.

    ## Action Space
    ``Discrete(1 + T·S)``: 0 = keep listening; ``1 + t·S + s`` = speak to target option
    ``t`` with strategy ``s`` (:class:`~rescue_env.taxonomy.ActionEncoding`). Couples:
    T = 3 (each partner, the couple), S = 10 → 31 actions. Families (cap 6): T = 22
    (6 members, 15 dyads, the family), S = 8 → 177 actions. Targets naming absent
    members are masked: ``info["action_mask"]`` (``int8``, for ``Discrete.sample(mask=)``),
    :meth:`action_mask_factored` (intervene, target, strategy; also in the reset ``info``) and
    :meth:`action_masks` (sb3-contrib's MaskablePPO). A masked action is played as
    listening and flagged ``info["invalid_action"]``.

    ## Observation Space
    ``Dict`` of ``Box`` (float32), padded to the group cap N:
    ``distress`` (N,) in [0, 1]; ``stance`` (N, N) in [−1, 1]; ``pattern`` one-hot over the
    scenario's patterns plus "no clear pattern"; ``present`` (N,) member mask;
    ``untended`` (N,) rows since each member was addressed / 10, capped at 1;
    ``tempo`` (2,) = (t / horizon, consecutive interventions / 3 capped at 1);
    the therapist's own last move: ``last_strategy`` one-hot over the strategies,
    ``last_target`` (N,) the members it addressed (both zero before any move; at reset, the
    seed rows'); the turn the therapist answers: ``speaker`` (N,) one-hot of the client who spoke last,
    ``spoken_to`` (N + 2,) whom that turn addressed (members, then the therapist, then the
    whole group), ``utterance`` one-hot of its utterance type
    (:data:`rescue_env.taxonomy.labels.UTTERANCE_TYPES`); all zero before any client spoke.

    ## Starting State
    A seed dialogue drawn uniformly, cut uniformly between ``min_prefix`` rows and its last row.
    ``reset(options={"dialogue": sample_id, "start_row": k})`` fixes either.

    ## Rewards
    σ* (:mod:`rescue_env.reward`): ``−w_mean·mean d + β·mean g − λ·max d − c·z``; each
    weighted component in ``info["sigma"]``.

    ## Episode End
    ``terminated`` when the group settles (every member's distress below
    ``settle_threshold`` for ``settle_steps`` steps; off with ``terminate_on_settle=False``);
    ``truncated`` at ``horizon`` steps: the env owns truncation (the ids are registered
    without ``max_episode_steps``, so ``gym.make(id, horizon=H)`` plays H steps). The final ``info`` carries ``sigma_return`` (discounted
    with ``reward.gamma``) and ``episode_stats`` (components, final and peak worst-off
    distress, untended turns…; not ``episode``, which SB3's ``Monitor`` and gymnasium's
    ``RecordEpisodeStatistics`` own).

    ## Information
    ``state`` (a copy of the :class:`~rescue_env.state.GroupState`), ``sigma``,
    ``action_mask``, ``intervened``, ``invalid_action`` (reset: ``state``, ``action_mask``,
    ``action_mask_factored``). Infos are kept small on purpose: SB3's ``DummyVecEnv``
    deep-copies them every step. With
    ``record_transcript=True`` also ``rows`` (the new benchmark rows).

    ## Arguments
    The fields of :class:`~rescue_env.config.EnvSpec`, as keywords: ``scenario``
    ("couple"/"family") and the other settings of :class:`~rescue_env.config.EnvConfig`
    (``horizon`` 30, ``max_members``, ``min_prefix`` 2, ``settle_threshold`` 0.2,
    ``settle_steps`` 3, ``terminate_on_settle``, ``record_transcript``, ``render_mode``) or
    ``config=EnvConfig(...)``; the inputs ``dynamics``, ``params``, ``heterogeneity``,
    ``data_path``, ``reward``; or a ready ``spec=EnvSpec(...)``.

    The batched path is the vector env: ``gym.make_vec(id, num_envs=N,
    vectorization_mode="vector_entry_point")`` (:class:`~rescue_env.envs.vector.GroupSupportVectorEnv`),
    same episodes as ``"sync"`` for the same seeds.

    ## Version History
    * v0: initial version.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 2}

    def __init__(self, scenario: str | None = None, **kwargs: Any):
        self.sim = Simulation(EnvSpec.of(scenario, **kwargs))
        self.core = self.sim.core(1)
        self.observation_space = self.sim.observer.space
        self.action_space = spaces.Discrete(self.sim.encoding.n_actions)
        self.render_mode = self.config.render_mode
        self.session: Session | None = None
        self._started = False  # a reset without a seed chains its key from the last episode's
        self._done = False
        self._text = ""
        self._last: tuple[TherapistMove, list[Row]] | None = None

    # settings and parts ---------------------------------------------------------------------
    config = property(lambda self: self.sim.config, doc="The env settings (:class:`EnvConfig`).")
    scenario = property(lambda self: self.config.scenario, doc="``couple`` or ``family``.")
    encoding = property(lambda self: self.sim.encoding, doc="The therapist's action encoding.")
    backend = property(lambda self: self.sim.backend, doc="The LLM client model, or ``None`` (calibrated).")
    dialogues = property(lambda self: self.sim.dialogues, doc="The seed dialogues.")
    observer = property(lambda self: self.sim.observer, doc="Observation spaces and layout.")
    record_transcript = property(lambda self: self.config.record_transcript, doc="Whether steps build benchmark rows.")
    params = property(lambda self: self.sim.params, doc="The calibrated model's parameters (:class:`ScenarioParams`).")

    @property
    def horizon(self) -> int:
        """Steps before truncation; setting it also rescales the observation's ``tempo``."""
        return self.config.horizon

    @horizon.setter
    def horizon(self, value: int) -> None:
        self.sim.set_horizon(self.core, value)

    @property
    def reward_cfg(self) -> RewardConfig:
        """σ*'s weights (frozen; assign a new :class:`RewardConfig` to change them)."""
        return self.core.reward

    @reward_cfg.setter
    def reward_cfg(self, value: RewardConfig) -> None:
        self.core.set_reward(value)

    # -------------------------------------------------------------------------------------
    def action_mask_factored(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(intervene[2], target[T], strategy[S])`` masks for factored action heads (also
        in the reset ``info``; constant within an episode since the group is fixed)."""
        self._session()
        return self.core.factored_masks(0)

    def action_masks(self) -> np.ndarray:
        """Boolean mask of valid actions (the method sb3-contrib's MaskablePPO calls)."""
        return self.core.mask_table[self._session().n].copy()

    @property
    def state(self) -> GroupState:
        """The live group state of the current episode (a view; changing it changes nothing)."""
        return self._session().state

    def _session(self) -> Session:
        if self.session is None:
            raise ResetNeeded("call reset() before using the env")
        return self.session

    def say(self, text: str) -> None:
        """The therapist's words for the next step's therapist row (e.g. an LLM therapist's
        utterance); without it the row takes a retrieved line."""
        self._text = str(text)

    # -------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        dialogue, row = start_options(self.sim.starts, options)
        key = episode_key(self.np_random) if seed is not None or not self._started else self.core.next_episode_key(0)
        self._started = True
        self.core.reset([0], [key], [dialogue], [row])
        self.session = self._new_session(key)
        self._done = False
        self._text = ""
        self._last = None
        info = {"state": self.session.state.copy(), "action_mask": self.core.mask_table_int8[self.session.n].copy()}
        info["action_mask_factored"] = self.action_mask_factored()
        return self._obs(), info

    def _new_session(self, key: int) -> Session:
        dialogue, cut, members, snapshot = self.core.start_of(0)
        c = self.config
        # the live start (the drawn clients' baseline moves the seed's distress), the seed's words
        return Session(dialogue, cut, members, self.core.state_view(0, snapshot), self.encoding, record=c.record_transcript, text_bank=self.sim.text_bank, text_seed=key)

    def _obs(self) -> dict[str, np.ndarray]:
        return self.sim.observer.unflatten(self.core.obs[0])

    def step(self, action):
        return self.play(action)

    def play(self, action: Any, behaviours: dict[int, Behaviour | None] | None = None):
        """:meth:`step` with client agents' turns: ``behaviours`` ``{slot: Behaviour}`` (or
        ``None``: silent) fix those slots' turns, the client model plays the others (the
        PettingZoo env's step)."""
        session, a = self._check_step(action)
        step = self.sim.step(self.core, session, a, text=self._take_text(), behaviours=behaviours)
        return self._result(session, step)

    async def astep(self, action, *, therapist_text: str = "", behaviours: dict[int, Behaviour | None] | None = None):
        """:meth:`step` as a coroutine: an LLM client model's calls are awaited, so many
        episodes share one event loop. ``therapist_text`` as with :meth:`say`; ``behaviours``
        as with :meth:`play`."""
        if therapist_text:
            self.say(therapist_text)
        session, a = self._check_step(action)
        step = await self.sim.astep(self.core, session, a, text=self._take_text(), behaviours=behaviours)
        return self._result(session, step)

    def _check_step(self, action: Any) -> tuple[Session, int]:
        session = self._session()
        if self._done:
            raise ResetNeeded("the episode has ended (terminated or truncated): call reset() before step()")
        return session, check_action(action, self.encoding.n_actions, self.action_space)

    def _take_text(self) -> str:
        text, self._text = self._text, ""
        return text

    def _result(self, session: Session, step: Step):
        core = self.core
        self._last = (step.move, step.rows)
        terminated, truncated = bool(core.terminated[0]), bool(core.truncated[0])
        intervened, invalid = core.step_flags(0)
        info: dict[str, Any] = {
            "state": session.state,
            "action_mask": core.mask_table_int8[session.n].copy(),
            "sigma": core.step_components(0),
            "intervened": intervened,
            "invalid_action": invalid,
        }
        if self.config.record_transcript:
            info["rows"] = step.rows
        if terminated or truncated:
            self._done = True
            stats = core.stats(0)
            info["sigma_return"] = stats["sigma_return"]
            info["episode_stats"] = stats
        return self._obs(), float(core.rewards[0]), terminated, truncated, info

    def episode_stats(self) -> dict[str, Any]:
        """The current episode's figures so far (as in the final ``info["episode_stats"]``)."""
        self._session()
        return self.core.stats(0)

    # -------------------------------------------------------------------------------------
    def render(self):
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='ansi' or 'rgb_array' to make()")
            return None
        session = self._session()
        from rescue_env.envs.render import render_ansi, render_rgb

        if self.render_mode == "ansi":
            return render_ansi(session, self._last)
        return render_rgb(session)

    def close(self) -> None:
        """Release what the env holds: the LLM client model's connections included."""
        backend = self.backend
        if backend is not None and hasattr(backend, "close"):
            backend.close()
        self.session = None
        super().close()
