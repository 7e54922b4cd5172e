"""rescue-env: simulation environments for group-support (couple and family therapy) agents.

Gymnasium ids (registered on import): ``rescue_env/Couple-v0``, ``rescue_env/Family-v0``.
PettingZoo factories: :func:`parallel_env`, :func:`raw_env`, :func:`env`.
"""

from rescue_env.registration import register_envs

register_envs()

from rescue_env.envs.pz_env import env, parallel_env, raw_env  # noqa: E402

__all__ = ["env", "parallel_env", "raw_env", "register_envs"]
__version__ = "0.1.0"
