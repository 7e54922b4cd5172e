"""Environments over one :class:`~rescue_env.session.Session`: Gymnasium, PettingZoo, and a
native stable-baselines3 ``VecEnv`` for training."""

from typing import Any

from rescue_env.envs.gym_env import GroupSupportEnv

__all__ = ["GroupSupportEnv", "GroupSupportVecEnv"]


def __getattr__(name: str) -> Any:
    # the VecEnv imports stable-baselines3 (and torch): only when asked for
    if name == "GroupSupportVecEnv":
        from rescue_env.envs.vec_env import GroupSupportVecEnv

        return GroupSupportVecEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
