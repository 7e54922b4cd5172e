"""A native stable-baselines3 ``VecEnv`` of N therapist sessions, for RL training.

``GroupSupportVecEnv`` runs N sessions in one simulator core (:mod:`rescue_env.core`) and
hands SB3 the core's ``(N, D)`` float32 observation buffer, in the flat layout of
gymnasium's ``spaces.flatten`` of the env's ``Dict`` observation (so SB3's ``MlpPolicy``
takes it as it takes CartPole's). ``DummyVecEnv`` over the Gymnasium env gives the same
episodes (flattened), slower: it builds a ``Dict`` observation and an info dict per env per
step and deep-copies every info.

Same episodes as ``DummyVecEnv``: env ``i`` is reset with ``seed + i`` and auto-resets the way
SB3's vectorised envs do (in the same step; the final observation is in
``infos[i]["terminal_observation"]``), each later episode keyed from the previous one.

Infos are empty dicts except when an episode ends: then ``terminal_observation``,
``TimeLimit.truncated``, ``episode`` (``r``, ``l``, ``t``: what SB3's ``Monitor`` writes and
its logger reads for ``rollout/ep_rew_mean``), ``sigma_return`` and ``episode_stats``.
MaskablePPO finds the masks through ``env_method("action_masks")``; :meth:`action_masks`
returns them as one ``(N, A)`` array.

``get_attr``/``set_attr`` reach the settings every session shares (``reward_cfg``,
``horizon``, ``config``, ``scenario``, ``encoding``…); a new ``RewardConfig`` set with
``set_attr("reward_cfg", ...)`` applies from the next step. ``RewardConfig`` is frozen, so
changing a weight in place is refused rather than silently ignored.

The first step after a fresh install compiles the core (a few seconds); numba caches it
on disk, so later processes start at once.

Example::

    from sb3_contrib import MaskablePPO
    from rescue_env.envs import GroupSupportVecEnv

    venv = GroupSupportVecEnv("couple", num_envs=8, seed=0)
    model = MaskablePPO("MlpPolicy", venv).learn(50_000)
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvObs, VecEnvStepReturn

from rescue_env.config import EnvSpec
from rescue_env.core import SAME_STEP
from rescue_env.envs.vector import Batch
from rescue_env.reward import RewardConfig

#: attributes every session shares, readable through ``get_attr``
_SHARED = frozenset({"config", "scenario", "horizon", "reward_cfg", "encoding", "observer", "render_mode", "dialogues"})
#: per-session methods reachable through ``env_method``
_METHODS = frozenset({"action_masks", "action_mask_factored", "episode_stats"})


class GroupSupportVecEnv(VecEnv):
    """N therapist sessions stepped together, flat observations (module docstring).

    Args:
        scenario: ``"couple"`` or ``"family"``.
        num_envs: number of parallel sessions.
        seed: seeds the first reset (env ``i`` gets ``seed + i``), like ``make_vec_env``;
            ``None`` leaves seeding to :meth:`seed` or to fresh entropy.
        **kwargs: the fields of :class:`~rescue_env.config.EnvSpec`, as for
            :class:`~rescue_env.envs.gym_env.GroupSupportEnv` (calibrated model only; no
            transcript, no rendering).
    """

    def __init__(self, scenario: str | None = None, num_envs: int = 8, *, seed: int | None = None, **kwargs: Any):
        self._batch = Batch(num_envs, EnvSpec.of(scenario, **kwargs))
        sim = self._batch.sim
        self.render_mode = None  # the batched envs do not render
        super().__init__(self._batch.n, sim.observer.flat_space, spaces.Discrete(sim.encoding.n_actions))
        self._ep_return = np.zeros(self.num_envs)
        self._ep_length = np.zeros(self.num_envs, dtype=np.int64)
        self._actions = np.zeros(self.num_envs, dtype=np.int64)
        self._t_start = time.time()
        self._idx = np.arange(self.num_envs)
        if seed is not None:
            self.seed(seed)

    # shared settings ---------------------------------------------------------------------
    @property
    def core(self):
        """The simulator core (its arrays are the sessions' live state)."""
        return self._batch.core

    config = property(lambda self: self._batch.config)
    scenario = property(lambda self: self._batch.config.scenario)
    horizon = property(lambda self: self._batch.config.horizon)
    encoding = property(lambda self: self._batch.sim.encoding)
    observer = property(lambda self: self._batch.sim.observer)
    dialogues = property(lambda self: self._batch.sim.dialogues)

    @property
    def reward_cfg(self) -> RewardConfig:
        return self._batch.core.reward

    # SB3 VecEnv API --------------------------------------------------------------------
    def reset(self) -> VecEnvObs:
        if any(o for o in self._options):
            options = self._options[0]
            if any(o != options for o in self._options):
                raise ValueError("GroupSupportVecEnv takes the same reset options for every env")
        else:
            options = None
        self._batch.reset(self._idx, list(self._seeds), options)
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        self.reset_infos = [{} for _ in range(self.num_envs)]
        self._reset_seeds()
        self._reset_options()
        return self._batch.core.obs.copy()

    def step_async(self, actions: np.ndarray) -> None:
        if not self._batch.started.all():
            raise RuntimeError("call reset() before step()")
        self._actions[:] = self._batch.check_actions(actions)

    def step_wait(self) -> VecEnvStepReturn:
        core = self._batch.core
        core.step(self._actions, SAME_STEP)
        rewards = core.rewards.astype(np.float32)
        dones = core.terminated | core.truncated
        self._ep_return += core.rewards
        self._ep_length += 1
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        if dones.any():
            t = round(time.time() - self._t_start, 6)
            for i in np.flatnonzero(dones).tolist():
                stats = core.stats(i, final=True)
                infos[i] = {
                    "terminal_observation": core.final_obs[i].copy(),
                    "TimeLimit.truncated": bool(core.truncated[i]),
                    "episode": {"r": float(self._ep_return[i]), "l": int(self._ep_length[i]), "t": t},
                    "sigma_return": stats["sigma_return"],
                    "episode_stats": stats,
                }
            self._ep_return[dones] = 0.0
            self._ep_length[dones] = 0
        return core.obs.copy(), rewards, dones.copy(), infos

    def close(self) -> None:
        self._batch.started[:] = False

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        if attr_name in _METHODS:  # each session's method (sb3-contrib looks for action_masks)
            return [functools.partial(self._session_method, attr_name, i) for i in self._get_indices(indices)]
        if attr_name not in _SHARED:
            raise AttributeError(f"GroupSupportVecEnv shares {sorted(_SHARED)} across its sessions; {attr_name!r} is not one of them")
        value = getattr(self, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        if indices is not None and list(self._get_indices(indices)) != list(range(self.num_envs)):
            raise ValueError("GroupSupportVecEnv's settings are shared by every session: set them for all (indices=None)")
        if attr_name == "reward_cfg":
            self._batch.core.set_reward(value)
        elif attr_name == "horizon":
            self._batch.sim.set_horizon(self._batch.core, value)
        else:
            raise AttributeError(f"GroupSupportVecEnv can set 'reward_cfg' and 'horizon'; not {attr_name!r} (build a new VecEnv with other settings)")

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any) -> list[Any]:
        if method_name not in _METHODS:
            raise AttributeError(f"GroupSupportVecEnv's sessions offer {sorted(_METHODS)}; not {method_name!r}")
        idx = list(self._get_indices(indices))
        if method_name == "action_masks":  # MaskablePPO asks every step: one table lookup
            masks = self._batch.core.masks()
            return [masks[i] for i in idx]
        return [self._session_method(method_name, i) for i in idx]

    def _session_method(self, name: str, i: int) -> Any:
        core = self._batch.core
        if name == "action_masks":
            return core.masks()[i]
        if name == "action_mask_factored":
            return core.factored_masks(i)
        return core.stats(i)

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        # the sessions are bare: nothing wraps them (episode statistics come from here)
        return [False for _ in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None for _ in range(self.num_envs)]

    # extras ------------------------------------------------------------------------------
    def action_masks(self) -> np.ndarray:
        """``(num_envs, n_actions)`` boolean masks of the current groups."""
        return self._batch.core.masks()
