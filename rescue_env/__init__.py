"""rescue-env: simulation environments for group-support (couple and family therapy) agents.

Gymnasium ids (registered on import): ``rescue_env/Couple-v0``, ``rescue_env/Family-v0``.
PettingZoo factories: :func:`parallel_env`, :func:`raw_env`, :func:`env`.
"""

from typing import Any

from rescue_env.registration import register_envs

register_envs()

__all__ = ["env", "parallel_env", "raw_env", "register_envs"]
__version__ = "0.1.0"

_PETTINGZOO = ("env", "parallel_env", "raw_env")


def __getattr__(name: str) -> Any:
    # the PettingZoo factories load the simulator core (numba) and PettingZoo: imported when
    # first used, so that `import rescue_env` (and every `rescue` command's start) stays light
    if name in _PETTINGZOO:
        from rescue_env.envs import pz_env

        return getattr(pz_env, name)
    raise AttributeError(f"module 'rescue_env' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_PETTINGZOO])
