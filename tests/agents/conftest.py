"""Fixtures of the agent tests: the bundled seeds, hand-built group states, tiny freshly
trained SB3 policies (MaskablePPO and PPO, one per scenario) and an episode driver."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rescue_env.data import Dialogue, load_dialogues
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.state import GroupState

SCENARIOS = ("couple", "family")
NON_LEARNED = ("never", "random", "heuristic", "imitation")
SB3_ALGOS = ("maskable_ppo", "ppo")


@pytest.fixture(scope="session")
def seeds() -> list[Dialogue]:
    return load_dialogues()


@pytest.fixture(scope="session")
def families(seeds: list[Dialogue]) -> list[Dialogue]:
    """The three bundled families (3, 4 and 5 members: below the cap of 6)."""
    fam = sorted((d for d in seeds if d.scenario == "family"), key=lambda d: len(d.participants))
    assert [len(d.participants) for d in fam] == [3, 4, 5]
    return fam


def _make_state(
    scenario: str,
    distress: list[float],
    *,
    pattern: str | None = None,
    untended: list[int] | None = None,
    last_speaker: str | None = None,
    members: list[str] | None = None,
) -> GroupState:
    """A hand-built :class:`GroupState` (neutral stances, every member annotated)."""
    n = len(distress)
    members = members or [f"M{i}" for i in range(n)]
    return GroupState(
        scenario=scenario,  # type: ignore[arg-type]
        members=tuple(members),
        distress=np.asarray(distress, dtype=float),
        intensity=np.asarray([10 * d for d in distress], dtype=float),
        emotion=["feels upset"] * n,
        stance=np.zeros((n, n)),
        pattern=pattern,
        row_index=10,
        untended=np.asarray(untended if untended is not None else [0] * n, dtype=np.int64),
        last_speaker=last_speaker,
    )


@pytest.fixture(scope="session")
def make_state() -> Callable[..., GroupState]:
    """``make_state(scenario, distress, pattern=, untended=, last_speaker=, members=)``."""
    return _make_state


@pytest.fixture(scope="session")
def sb3_policies(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    """``{(algo, scenario): model.zip}``: MaskablePPO and PPO trained for 128 steps (2 envs ×
    64 steps) on each scenario, small nets; seeded, so the models are reproducible."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("sb3")
    out: dict[tuple[str, str], Path] = {}
    for scenario in SCENARIOS:
        for algo in SB3_ALGOS:
            venv = DummyVecEnv([lambda: Monitor(GroupSupportEnv(scenario)) for _ in range(2)])
            cls = MaskablePPO if algo == "maskable_ppo" else PPO
            model = cls("MultiInputPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu", policy_kwargs={"net_arch": [32, 32]})
            model.learn(total_timesteps=128)
            path = folder / f"{algo}_{scenario}.zip"
            model.save(path)
            venv.close()
            out[(algo, scenario)] = path
    return out


@pytest.fixture(scope="session")
def build_agent(seeds: list[Dialogue], sb3_policies: dict[tuple[str, str], Path]) -> Callable[..., Any]:
    """``build_agent(name, scenario, **kw)``: any agent through :func:`agents.make_agent`
    (SB3 agents load the fixture's policy for the scenario)."""
    from rescue_env.agents import make_agent

    def build(name: str, scenario: str, **kw: Any):
        if name in SB3_ALGOS:
            kw.setdefault("policy", str(sb3_policies[(name, scenario)]))
        return make_agent(name, scenario, seed=kw.pop("seed", 0), imitation_data=seeds, **kw)

    return build


@pytest.fixture
def play() -> Callable[..., list[dict[str, Any]]]:
    """Play one full episode of ``agent`` on ``env``; returns per step the mask the agent
    saw, its action, the state, and whether the env flagged the action invalid."""

    def _play(env: GroupSupportEnv, agent: Any, *, seed: int = 0, options: dict | None = None) -> list[dict[str, Any]]:
        obs, info = env.reset(seed=seed, options=options)
        agent.reset(seed=seed)
        steps = []
        for _ in range(env.horizon + 1):
            mask = info["action_mask"].copy()
            state = info["state"]
            action = agent.act(obs, info["action_mask"], info["state"])
            obs, _, term, trunc, info = env.step(action)
            steps.append({"mask": mask, "action": action, "state": state, "invalid": info["invalid_action"]})
            if term or trunc:
                return steps
        raise AssertionError(f"episode did not end within horizon {env.horizon}")

    return _play
