"""Gymnasium environment: the therapist's single-agent view of a simulated session."""

from __future__ import annotations

from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rescue_env.data.schema import Dialogue
from rescue_env.dynamics.base import ClientBackend
from rescue_env.dynamics.params import DynamicsParams
from rescue_env.envs.common import EpisodeBook, configure_session_env, start_session
from rescue_env.reward import RewardConfig
from rescue_env.session import Session, StepResult
from rescue_env.state import GroupState


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
    ``tempo`` (2,) = (t / horizon, consecutive interventions / 3 capped at 1).

    ## Starting State
    A seed dialogue drawn uniformly, cut uniformly between ``min_prefix`` rows and its last row.
    ``reset(options={"dialogue": sample_id, "start_row": k})`` fixes either.

    ## Rewards
    σ* (:mod:`rescue_env.reward`): ``−w_mean·mean d + β·mean g − λ·max d − c·z``; each
    weighted component in ``info["sigma"]``.

    ## Episode End
    ``terminated`` when the group settles (every member's distress below
    ``settle_threshold`` for ``settle_steps`` steps; off with ``terminate_on_settle=False``);
    ``truncated`` at ``horizon`` steps. The final ``info`` carries ``sigma_return`` (discounted
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
    ``scenario`` ("couple"/"family"), ``dynamics`` ("calibrated" or a backend instance),
    ``params`` (parameter file or object for the calibrated backend), ``data_path`` (seed
    dialogues: a path or a list of :class:`Dialogue`), ``horizon`` (30), ``reward``
    (:class:`RewardConfig` or dict), ``max_members`` (family cap, 6), ``min_prefix`` (2),
    ``settle_threshold`` (0.2), ``settle_steps`` (3), ``terminate_on_settle`` (True),
    ``record_transcript`` (False), ``render_mode`` ("ansi" or "rgb_array").

    ## Version History
    * v0: initial version.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 2}

    def __init__(
        self,
        scenario: str = "couple",
        *,
        dynamics: str | ClientBackend = "calibrated",
        params: DynamicsParams | str | None = None,
        data_path: str | Sequence[Dialogue] | None = None,
        horizon: int = 30,
        reward: RewardConfig | dict[str, float] | None = None,
        max_members: int | None = None,
        min_prefix: int = 2,
        settle_threshold: float = 0.2,
        settle_steps: int = 3,
        terminate_on_settle: bool = True,
        record_transcript: bool = False,
        render_mode: str | None = None,
    ):
        configure_session_env(
            self,
            scenario,
            dynamics=dynamics,
            params=params,
            data_path=data_path,
            horizon=horizon,
            reward=reward,
            max_members=max_members,
            min_prefix=min_prefix,
            settle_threshold=settle_threshold,
            settle_steps=settle_steps,
            terminate_on_settle=terminate_on_settle,
            record_transcript=record_transcript,
            render_mode=render_mode,
        )
        self.observation_space = self.observer.space
        self.action_space = spaces.Discrete(self.encoding.n_actions)
        self.session: Session | None = None
        self._mask = np.ones(self.encoding.n_actions, dtype=np.int8)
        self._factored: tuple[np.ndarray, ...] = ()
        self._masks_by_size: dict[int, tuple[np.ndarray, tuple[np.ndarray, ...]]] = {}
        self._last: StepResult | None = None

    # -------------------------------------------------------------------------------------
    def _get_obs(self) -> dict[str, np.ndarray]:
        assert self.session is not None
        return self.observer.observe(self.session)

    def _info(self) -> dict[str, Any]:
        assert self.session is not None
        return {"state": self.session.state.copy(), "action_mask": self._mask.copy()}

    def action_mask_factored(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(intervene[2], target[T], strategy[S])`` masks for factored action heads (also
        in the reset ``info``; constant within an episode since the group is fixed)."""
        return tuple(m.copy() for m in self._factored)  # type: ignore[return-value]

    def action_masks(self) -> np.ndarray:
        """Boolean mask of valid actions (the method sb3-contrib's MaskablePPO calls)."""
        return self._mask.astype(bool)

    @property
    def state(self) -> GroupState:
        """The live group state of the current episode."""
        if self.session is None:
            raise RuntimeError("call reset() before reading the state")
        return self.session.state

    # -------------------------------------------------------------------------------------
    @property
    def horizon(self) -> int:
        """Steps before truncation; setting it also rescales the observation's ``tempo``."""
        return self._horizon

    @horizon.setter
    def horizon(self, value: int) -> None:
        if int(value) < 1:
            raise ValueError(f"horizon must be at least 1, got {value}")
        self._horizon = int(value)
        observer = self.__dict__.get("observer")
        if observer is not None:
            observer.horizon = self._horizon

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._begin(seed, options)
        return self._get_obs(), self._reset_info()

    def _reset_info(self) -> dict[str, Any]:
        info = self._info()
        info["action_mask_factored"] = self.action_mask_factored()
        return info

    def _begin(self, seed: int | None, options: dict[str, Any] | None) -> None:
        """Start an episode (session, masks, σ* book) without building an observation or
        info: the part of :meth:`reset` the vectorised env needs at every auto-reset."""
        super().reset(seed=seed)
        self.session = start_session(self, self.np_random, options or {})
        n = self.session.n
        masks = self._masks_by_size.get(n)
        if masks is None:  # fixed per group size: built once per env
            masks = self._masks_by_size[n] = (self.encoding.mask(n), self.encoding.factored_mask(n))
        self._mask, self._factored = masks
        self.book = EpisodeBook(self.session, self.reward_cfg, self.settle_threshold, self.settle_steps)
        self._last = None

    def step(self, action):
        if self.session is None:
            raise RuntimeError("call reset() before step()")
        try:
            a = int(action)
        except (TypeError, ValueError):
            raise ValueError(f"action {action!r} is not an integer in {self.action_space}") from None
        if a != action or not 0 <= a < self.encoding.n_actions:
            raise ValueError(f"action {action!r} outside {self.action_space}")
        reward, components, terminated, truncated = self._advance(a)
        result = self._last
        assert result is not None
        info = self._info()
        info["sigma"] = components
        info["intervened"] = result.move.intervene
        info["invalid_action"] = result.invalid_action
        if self.record_transcript:
            info["rows"] = result.rows
        if terminated or truncated:
            info["sigma_return"] = self.book.sigma_return
            info["episode_stats"] = self.book.stats()
        return self._get_obs(), float(reward), terminated, truncated, info

    def _advance(self, action: int) -> tuple[float, dict[str, float], bool, bool]:
        """Move the session and the σ* book one step on a checked flat action: (reward,
        components, terminated, truncated). Shared with the vectorised env, which builds
        no per-step info."""
        result = self.session.step(action)  # type: ignore[union-attr]
        self._last = result
        reward, components = self.book.record(result.move, result.invalid_action)
        terminated = self.terminate_on_settle and self.book.settled
        truncated = not terminated and self.session.t >= self.horizon  # type: ignore[union-attr]
        return reward, components, terminated, truncated

    # -------------------------------------------------------------------------------------
    def render(self):
        if self.render_mode is None:
            gym.logger.warn("render() called without a render_mode; pass render_mode='ansi' or 'rgb_array' to make()")
            return None
        if self.session is None:
            raise RuntimeError("call reset() before render()")
        from rescue_env.envs.render import render_ansi, render_rgb

        if self.render_mode == "ansi":
            return render_ansi(self.session, self._last)
        return render_rgb(self.session)
