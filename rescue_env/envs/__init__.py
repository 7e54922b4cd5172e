"""Environments over one :class:`~rescue_env.session.Session`: Gymnasium and PettingZoo."""

from rescue_env.envs.gym_env import GroupSupportEnv

__all__ = ["GroupSupportEnv"]
