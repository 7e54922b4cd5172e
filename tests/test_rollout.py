"""The runner of a job (:func:`rescue_env.rollout.run_episodes`): one or many episodes in
flight give the same file, a rerun plays only what is missing or failed (a torn line or gzip
member included), and the envs and agents are reused one episode at a time."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from rescue_env.data import load_dialogues
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.jsonl import decode
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


# --- the gzip journal -----------------------------------------------------------------------


def test_a_gzip_journal_holds_the_plain_lines_one_member_per_episode(seeds, tmp_path):
    plain, gz = tmp_path / "p.jsonl", tmp_path / "g.jsonl.gz"
    run(plain, seeds)
    run(gz, seeds)
    decoded = decode(gz.read_bytes())
    assert decoded.gzip and decoded.cut is None and decoded.data == plain.read_bytes()
    assert len(decoded.members) == len(jobs_of(seeds))  # one member per episode, each whole alone


def test_a_torn_last_gzip_member_is_cut_and_only_its_episode_played_again(seeds, tmp_path, caplog):
    whole = tmp_path / "whole.jsonl.gz"
    run(whole, seeds)
    members = decode(whole.read_bytes()).members
    cut = tmp_path / "cut.jsonl.gz"
    torn_at = members[-2][0] + (members[-1][0] - members[-2][0]) // 2  # half of the last member
    cut.write_bytes(whole.read_bytes()[:torn_at])
    again = run(cut, seeds)
    assert again.skipped == len(members) - 1 and [r.key for r in again.ran] == [jobs_of(seeds)[-1].key]
    assert cut.read_bytes() == whole.read_bytes()
    (backup,) = tmp_path.glob("cut.jsonl.gz.cut-*")
    assert backup.read_bytes() == whole.read_bytes()[members[-2][0] : torn_at]
    assert "line 8 is not a whole episode; kept the 7 episodes before it" in caplog.text


def test_a_file_gzipped_by_hand_is_resumed_and_ends_one_member_per_episode(seeds, tmp_path):
    whole = tmp_path / "whole.jsonl.gz"
    run(whole, seeds)
    text = decode(whole.read_bytes()).data
    half = tmp_path / "half.jsonl.gz"
    half.write_bytes(gzip.compress(b"".join(text.splitlines(keepends=True)[:4])))  # `gzip` of a plain file: one member
    again = run(half, seeds)
    assert again.skipped == 4 and len(again.ran) == 4
    assert half.read_bytes() == whole.read_bytes()
