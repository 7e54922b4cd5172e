"""Environments over one simulator core (:mod:`rescue_env.core`): Gymnasium (single and
vector), PettingZoo, and a native stable-baselines3 ``VecEnv`` for training."""

from typing import Any

from rescue_env.envs.gym_env import GroupSupportEnv, ResetNeeded
from rescue_env.envs.vector import GroupSupportVectorEnv

__all__ = ["GroupSupportEnv", "GroupSupportVecEnv", "GroupSupportVectorEnv", "ResetNeeded"]


def __getattr__(name: str) -> Any:
    # the SB3 VecEnv imports stable-baselines3 (and torch): only when asked for
    if name == "GroupSupportVecEnv":
        from rescue_env.envs.vec_env import GroupSupportVecEnv

        return GroupSupportVecEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
