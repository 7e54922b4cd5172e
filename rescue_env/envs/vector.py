"""Batched envs: N sessions in one core, stepped by one compiled call.

:class:`GroupSupportVectorEnv` is a ``gymnasium.vector.VectorEnv``, registered as each env
id's ``vector_entry_point``::

    envs = gym.make_vec("rescue_env/Couple-v0", num_envs=256, vectorization_mode="vector_entry_point")

Infos: ``action_mask`` every step; when episodes end, ``sigma_return``, ``episode_steps``,
``peak_max_distress``, ``interventions`` and ``invalid_actions`` as arrays with their
``_key`` masks (gymnasium's vector info layout).

Same spaces, episodes and auto-reset as ``vectorization_mode="sync"`` (gymnasium's
``NEXT_STEP`` mode: the step after an episode ends returns the next episode's first
observation with reward 0), for the same seeds: session ``i`` is seeded with ``seed + i`` and
each later episode's key chains from the previous one, exactly as a ``GroupSupportEnv``
reset without a seed. Masks: :meth:`action_masks` (``(N, A)`` bool) and ``infos["action_mask"]``.

The SB3 ``VecEnv`` for training (:class:`~rescue_env.envs.vec_env.GroupSupportVecEnv`) runs
the same :class:`Batch` with SB3's conventions (flat observations, same-step auto-reset).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from rescue_env.config import EnvConfig, EnvSpec
from rescue_env.core import NEXT_STEP, Core
from rescue_env.envs.common import Simulation, episode_key, start_options
from rescue_env.reward import RewardConfig


class Batch:
    """N calibrated sessions: the simulation, its core, and the episode keys' seeding (what
    both batched envs are built on)."""

    def __init__(self, num_envs: int, spec: EnvSpec):
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be an integer ≥ 1, got {num_envs!r}")
        if spec.config.record_transcript or spec.config.render_mode is not None:
            # transcripts and rendering are for single episodes (rollouts); batches are for speed
            raise ValueError("the batched envs neither record transcripts nor render: use GroupSupportEnv (or gym.make_vec(..., vectorization_mode='sync')) for that")
        if not (isinstance(spec.dynamics, str) and spec.dynamics == "calibrated"):
            raise ValueError("the batched envs run the calibrated model only; LLM clients run in GroupSupportEnv (see `rescue rollout dynamics=llm`)")
        self.sim = Simulation(spec)
        self.n = int(num_envs)
        self.core: Core = self.sim.core(self.n)
        self.started = np.zeros(self.n, bool)

    @property
    def config(self) -> EnvConfig:
        return self.sim.config

    def reset(self, idx: np.ndarray, seeds: Sequence[int | None], options: dict[str, Any] | None) -> None:
        """Start sessions ``idx``; ``seeds[k]`` seeds session ``idx[k]`` (``None``: its key
        chains from its last episode, or comes from fresh entropy)."""
        dialogue, row = start_options(self.sim.starts, options)
        keys = []
        for e, seed in zip(idx.tolist(), seeds):
            if seed is not None or not self.started[e]:
                keys.append(episode_key(seeding.np_random(seed)[0]))
            else:
                keys.append(self.core.next_episode_key(e))
        self.core.reset(idx, keys, [dialogue] * len(idx), [row] * len(idx))
        self.started[idx] = True

    def check_actions(self, actions: Any) -> np.ndarray:
        acts = np.asarray(actions)
        n_actions = self.sim.encoding.n_actions
        if acts.shape not in ((self.n,), (self.n, 1)) or acts.dtype.kind not in "iu":
            raise ValueError(f"expected {self.n} integer actions in Discrete({n_actions}), got an array of shape {acts.shape} and dtype {acts.dtype}")
        acts = np.ascontiguousarray(acts.reshape(self.n), np.int64)
        if acts.view(np.uint64).max() >= n_actions:  # one pass: a negative action is a huge uint64
            raise ValueError(f"actions outside Discrete({n_actions}): {acts[(acts < 0) | (acts >= n_actions)].tolist()}")
        return acts


class GroupSupportVectorEnv(VectorEnv):
    """``num_envs`` sessions of the calibrated model stepped together (module docstring).

    Args:
        num_envs: N.
        scenario, **kwargs: the fields of :class:`~rescue_env.config.EnvSpec`, as for
            :class:`~rescue_env.envs.gym_env.GroupSupportEnv` (the calibrated model only;
            no transcript, no rendering).
        max_episode_steps: refused unless it equals the horizon: the env truncates at its
            horizon (pass ``horizon=``).
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, num_envs: int = 8, scenario: str | None = None, *, max_episode_steps: int | None = None, **kwargs: Any):
        spec = EnvSpec.of(scenario, **kwargs)
        horizon = spec.config.horizon
        if max_episode_steps is not None and max_episode_steps != horizon:
            # one owner of truncation: the env, at its horizon
            raise ValueError(f"max_episode_steps={max_episode_steps} but horizon={horizon}: the env truncates at its horizon; pass horizon={max_episode_steps} instead of max_episode_steps")
        self._batch = Batch(num_envs, spec)
        sim = self._batch.sim
        self.num_envs = self._batch.n
        self.single_observation_space = sim.observer.space
        self.single_action_space = spaces.Discrete(sim.encoding.n_actions)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.render_mode = None
        self._idx = np.arange(self.num_envs)

    @property
    def config(self) -> EnvConfig:
        return self._batch.config

    @property
    def core(self) -> Core:
        """The simulator core (its arrays are the sessions' live state)."""
        return self._batch.core

    @property
    def reward_cfg(self) -> RewardConfig:
        return self._batch.core.reward

    @reward_cfg.setter
    def reward_cfg(self, value: RewardConfig) -> None:
        self._batch.core.set_reward(value)

    def _obs(self) -> dict[str, np.ndarray]:
        return self._batch.sim.observer.unflatten_batch(self._batch.core.obs)

    def action_masks(self) -> np.ndarray:
        """``(num_envs, n_actions)`` boolean masks of the current groups."""
        if not self._batch.started.all():
            raise RuntimeError("call reset() before reading the action masks")
        return self._batch.core.masks()

    def reset(self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None):
        """Reset every session. ``seed``: an int (session ``i`` gets ``seed + i``), a list of
        one seed per session, or ``None``. ``options`` as for ``GroupSupportEnv.reset``
        (applied to every session)."""
        if seed is None or isinstance(seed, (int, np.integer)):
            seeds: list[int | None] = [None if seed is None else int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"got {len(seeds)} seeds for {self.num_envs} envs")
        if seed is not None:
            self._np_random, self._np_random_seed = seeding.np_random(seeds[0])
        self._batch.reset(self._idx, seeds, options)
        return self._obs(), {"action_mask": self._batch.core.masks_int8()}

    def step(self, actions: Any):
        if not self._batch.started.all():
            raise RuntimeError("call reset() before step()")
        acts = self._batch.check_actions(actions)
        core = self._batch.core
        core.step(acts, NEXT_STEP)
        terminated = core.terminated.copy()
        truncated = core.truncated.copy()
        infos: dict[str, Any] = {"action_mask": core.masks_int8()}
        ended = terminated | truncated
        if ended.any():
            # the ended episodes' figures as arrays (gymnasium's vector info layout: a value
            # array and a "_key" mask); a per-episode dict would cost more than the step
            for key, values in core.episode_arrays().items():
                infos[key] = np.where(ended, values, 0)
                infos["_" + key] = ended.copy()
        return self._obs(), core.rewards.copy(), terminated, truncated, infos

    def close_extras(self, **kwargs: Any) -> None:
        self._batch.started[:] = False
