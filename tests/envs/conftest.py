"""Fixtures of the environment tests: the bundled seeds and small episode drivers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from rescue_env.data import Dialogue, load_dialogues
from rescue_env.envs.gym_env import GroupSupportEnv

SCENARIOS = ("couple", "family")


@pytest.fixture(scope="session")
def seeds() -> list[Dialogue]:
    """The bundled seed dialogues (couple and family)."""
    return load_dialogues()


@pytest.fixture(scope="session")
def small_family(seeds: list[Dialogue]) -> Dialogue:
    """The smallest bundled family (fewer members than the default cap of 6)."""
    fam = [d for d in seeds if d.scenario == "family"]
    return min(fam, key=lambda d: len(d.participants))


def fingerprint(obs: dict[str, np.ndarray]) -> tuple:
    """Hashable exact copy of a Dict observation."""
    return tuple((k, np.asarray(v).tobytes()) for k, v in sorted(obs.items()))


@pytest.fixture
def run_episode() -> Callable[..., dict[str, Any]]:
    """Play one episode of a Gymnasium env with a fixed action list (cycled) and return
    everything it emitted."""

    def _run(env: GroupSupportEnv, seed: int | None, actions: Sequence[int], *, options: dict | None = None, max_steps: int = 10_000) -> dict[str, Any]:
        obs, info = env.reset(seed=seed, options=options)
        out: dict[str, Any] = {"obs": [fingerprint(obs)], "rewards": [], "states": [info["state"]], "infos": [info], "rows": []}
        k = 0
        while k < max_steps:
            obs, r, term, trunc, info = env.step(actions[k % len(actions)])
            out["obs"].append(fingerprint(obs))
            out["rewards"].append(r)
            out["states"].append(info["state"])
            out["infos"].append(info)
            out["rows"].extend(row.to_dict() for row in info.get("rows", []))
            k += 1
            if term or trunc:
                out["terminated"], out["truncated"] = term, trunc
                break
        return out

    return _run
