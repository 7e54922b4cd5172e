"""Fixtures of the experiment tests: an in-process runner for the ``rescue`` Hydra commands
and one tiny rollout and one tiny training run shared by the tests that only read their run
folders. Both shared runs happen with ``OPENAI_API_KEY`` set to :data:`SENTINEL`, so the
secret-leak tests can scan them too."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from rescue_cli_helpers import Run, invoke

#: A fake API key; no file, log line or printed text of a run may contain it.
SENTINEL = "sk-SENTINEL-do-not-leak-7f3a9c2e41"

ROLLOUT_ARGS = ("episodes=1", "agents=[never,heuristic]", "progress=false")
TINY_TRAIN = (
    "total_timesteps=256",
    "n_envs=2",
    "n_steps=64",
    "batch_size=64",
    "eval_freq=128",
    "eval_episodes=2",
    "checkpoint_freq=128",
)


@pytest.fixture(scope="session")
def rescue() -> Callable[..., Run]:
    """``rescue(argv, env=...)`` → :class:`Run` (in-process)."""
    return invoke


@pytest.fixture(scope="session")
def rollout_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """``rescue rollout episodes=1 agents=[never,heuristic]`` (with the sentinel key set)."""
    d = tmp_path_factory.mktemp("rollout") / "run"
    run = invoke(["rollout", f"hydra.run.dir={d}", *ROLLOUT_ARGS], env={"OPENAI_API_KEY": SENTINEL})
    run.dir = d
    assert run.rc == 0, run.err[-3000:]
    return run


@pytest.fixture(scope="session")
def train_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """``rescue train`` for 256 steps (with the sentinel key set)."""
    d = tmp_path_factory.mktemp("train") / "run"
    run = invoke(["train", f"hydra.run.dir={d}", *TINY_TRAIN], env={"OPENAI_API_KEY": SENTINEL})
    run.dir = d
    assert run.rc == 0, run.err[-3000:]
    return run


@pytest.fixture(scope="session")
def couple_seeds_jsonl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled couple seeds alone, as a JSON Lines file (for policies trained on couples)."""
    from rescue_env.data import load_dialogues, write_jsonl

    path = tmp_path_factory.mktemp("data") / "couples.jsonl"
    write_jsonl([d for d in load_dialogues() if d.scenario == "couple"], path)
    return path


@pytest.fixture(scope="session")
def sentinel() -> str:
    return SENTINEL


@pytest.fixture(scope="session")
def tiny_train() -> tuple[str, ...]:
    """Overrides of a few-hundred-step training run."""
    return TINY_TRAIN


@pytest.fixture(scope="session")
def rollout_args() -> tuple[str, ...]:
    """Overrides of the shared tiny rollout (one episode per seed, never and heuristic)."""
    return ROLLOUT_ARGS
