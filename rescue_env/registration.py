"""All Gymnasium registrations in one place."""

from __future__ import annotations

import gymnasium as gym

from rescue_env.config import EnvConfig

ENV_IDS = {"rescue_env/Couple-v0": "couple", "rescue_env/Family-v0": "family"}


def register_envs() -> None:
    """Register the versioned env ids (idempotent)."""
    for env_id, scenario in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="rescue_env.envs.gym_env:GroupSupportEnv",
                vector_entry_point="rescue_env.envs.vector:GroupSupportVectorEnv",
                kwargs={"scenario": scenario},
                # the env's default horizon; gym.make(id, horizon=H) needs max_episode_steps=H too
                # (the env refuses a TimeLimit that disagrees with its horizon)
                max_episode_steps=EnvConfig.horizon,
            )
