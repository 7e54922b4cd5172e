"""All Gymnasium registrations in one place."""

from __future__ import annotations

import gymnasium as gym

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
                # no max_episode_steps: the env truncates at its horizon (gym.make(id,
                # horizon=H) plays H steps); a TimeLimit would be a second owner
            )
