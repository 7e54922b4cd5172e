"""The runner of a job (:func:`rescue_env.rollout.run_episodes`): one or many episodes in
flight give the same file, a rerun plays only what is missing or failed, and the envs and
agents are reused one episode at a time."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rescue_env.data import load_dialogues
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.rollout import EpisodeFailed, EpisodeJob, EpisodeJournal, record_key, run_episodes

EPISODES = 2


class _SeededAgent:
    """Acts at random from its own generator, reseeded by ``reset`` (like the baselines)."""

    def __init__(self, name: str, fail_on: set[str] = frozenset()):
        self.name, self.fail_on = name, fail_on
        self.rng = np.random.default_rng(0)
        self.sample_id = ""

    def reset(self, *, seed=None):
        self.rng = np.random.default_rng(seed)

    def act(self, observation, mask, state):
        if self.name in self.fail_on:
            raise EpisodeFailed("the agent could not go on")
        return int(self.rng.choice(np.flatnonzero(mask)))


@pytest.fixture(scope="module")
def seeds() -> list:
    ds = load_dialogues()
    return [next(d for d in ds if d.scenario == "couple"), next(d for d in ds if d.scenario == "family")]


def jobs_of(seeds: list, agents=("a", "b")) -> list[EpisodeJob]:
    return [EpisodeJob(d.scenario, a, d.sample_id, e) for d in seeds for a in agents for e in range(EPISODES)]


def run(path: Path, seeds: list, *, max_in_flight: int = 1, fail_on=frozenset(), built: list | None = None):
    built = [] if built is None else built

    def make_env(scenario):
        built.append(("env", scenario))
        return GroupSupportEnv(scenario, data_path=seeds, horizon=4, record_transcript=True)

    def make_agent(scenario, name, env):
        built.append(("agent", scenario, name))
        return _SeededAgent(name, fail_on)

    with EpisodeJournal(path) as journal:
        return run_episodes(jobs_of(seeds), journal, make_env=make_env, make_agent=make_agent, base_seed=3, max_in_flight=max_in_flight)


def test_one_or_many_in_flight_write_the_same_file(seeds, tmp_path):
    one = run(tmp_path / "one.jsonl", seeds)
    many = run(tmp_path / "many.jsonl", seeds, max_in_flight=5)
    assert (tmp_path / "one.jsonl").read_bytes() == (tmp_path / "many.jsonl").read_bytes()
    keys = [job.key for job in jobs_of(seeds)]
    assert [r.key for r in one.records] == [r.key for r in many.records] == keys
    assert [r.sigma_return for r in one.records] == [r.sigma_return for r in many.records]
    assert one.skipped == many.skipped == 0 and len(one.ran) == len(keys)


def test_one_in_flight_builds_one_env_per_scenario_and_one_agent_per_pair(seeds, tmp_path):
    built: list = []
    run(tmp_path / "e.jsonl", seeds, built=built)
    assert sorted(b for b in built if b[0] == "env") == [("env", "couple"), ("env", "family")]
    assert len([b for b in built if b[0] == "agent"]) == len(set(b for b in built if b[0] == "agent")) == 4


def test_a_rerun_plays_only_the_missing_episodes_and_ends_with_the_same_file(seeds, tmp_path):
    whole = tmp_path / "whole.jsonl"
    run(whole, seeds)
    cut = tmp_path / "cut.jsonl"
    lines = whole.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = lines[5:] + lines[:1]  # 4 of 8, out of order
    cut.write_text("".join(kept), encoding="utf-8")
    again = run(cut, seeds)
    assert again.skipped == 4 and len(again.ran) == 4
    assert {r.key for r in again.ran} == {r.key for r in again.records} - {json.loads(line)["sample_id"] for line in kept}
    assert cut.read_bytes() == whole.read_bytes()


def test_failed_episodes_are_kept_with_their_reason_and_played_again(seeds, tmp_path):
    path = tmp_path / "f.jsonl"
    first = run(path, seeds, fail_on={"b"})
    failed = [r for r in first.records if r.failed]
    assert {r.agent for r in failed} == {"b"} and len(failed) == 4
    assert all(r.error == "the agent could not go on" for r in failed)
    second = run(path, seeds)
    assert {r.key for r in second.ran} == {r.key for r in failed}
    assert not any(r.failed for r in second.records)
    run(tmp_path / "clean.jsonl", seeds)
    assert path.read_bytes() == (tmp_path / "clean.jsonl").read_bytes()


def test_the_key_names_agent_seed_dialogue_and_episode():
    assert record_key("heuristic", "couple/001", 3) == "rollout/heuristic/couple/001/ep3"
    assert EpisodeJob("couple", "heuristic", "couple/001", 3).key == record_key("heuristic", "couple/001", 3)
