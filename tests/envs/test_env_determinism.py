"""Same seed, same episode; different seeds, different episodes (issue 3, "Done when" 2)."""

from __future__ import annotations

import numpy as np
import pytest

from rescue_env import parallel_env
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.taxonomy.actions import ActionEncoding

SCENARIOS = ("couple", "family")


def _actions(scenario: str) -> list[int]:
    """A fixed action sequence mixing listening, individuals and the whole group, valid for
    any group size (individual slots 0 and 1 always exist)."""
    enc = ActionEncoding(scenario)
    return [0, enc.encode(0, 1), enc.encode(1, 3), 0, 0, enc.encode(enc.group_target, 2), enc.encode(0, 0), 0]


def _same(a: dict, b: dict) -> None:
    assert a["obs"] == b["obs"]
    assert a["rewards"] == b["rewards"]  # exact floats
    assert len(a["states"]) == len(b["states"])
    for sa, sb in zip(a["states"], b["states"]):
        assert sa == sb  # GroupState equality: distress, stance, pattern, bookkeeping
    assert a["rows"] == b["rows"]
    assert a["infos"][-1]["sigma_return"] == b["infos"][-1]["sigma_return"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_same_seed_same_episode(scenario, run_episode):
    acts = _actions(scenario)
    kw = dict(horizon=25, terminate_on_settle=False, record_transcript=True)
    a = run_episode(GroupSupportEnv(scenario, **kw), 123, acts)
    b = run_episode(GroupSupportEnv(scenario, **kw), 123, acts)
    assert len(a["rewards"]) == 25 and a["truncated"]
    assert len(a["rows"]) > 25  # the transcript grew every step
    _same(a, b)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_reseeding_the_same_instance_replays_the_episode(scenario, run_episode):
    env = GroupSupportEnv(scenario, horizon=15, terminate_on_settle=False)
    acts = _actions(scenario)
    first = run_episode(env, 7, acts)
    run_episode(env, None, acts)  # an unseeded episode in between moves the generator on
    run_episode(env, 99, acts)
    again = run_episode(env, 7, acts)
    _same(first, again)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_different_seeds_different_episodes(scenario, run_episode):
    acts = _actions(scenario)
    env = GroupSupportEnv(scenario, horizon=15, terminate_on_settle=False)
    runs = [run_episode(env, seed, acts) for seed in range(6)]
    keys = {tuple(r["obs"]) for r in runs}
    assert len(keys) == 6, "two seeds produced the same episode"
    assert len({tuple(r["rewards"]) for r in runs}) == 6


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_different_seeds_differ_in_dynamics_not_only_in_the_cut(scenario, run_episode, seeds):
    """With the seed dialogue and cut row fixed, the seed still changes the trajectory (the
    client model is stochastic), and equal seeds still agree. The start is the seed row's
    state; its distress is moved by the drawn clients' baseline (none for the mean client)."""
    d = next(d for d in seeds if d.scenario == scenario)
    opts = {"dialogue": d.sample_id, "start_row": 10}
    acts = _actions(scenario)
    mean_client = GroupSupportEnv(scenario, horizon=15, terminate_on_settle=False, heterogeneity=0.0)
    assert run_episode(mean_client, 1, acts, options=opts)["obs"][0] == run_episode(mean_client, 2, acts, options=opts)["obs"][0]
    env = GroupSupportEnv(scenario, horizon=15, terminate_on_settle=False)
    a = run_episode(env, 1, acts, options=opts)
    b = run_episode(env, 2, acts, options=opts)
    c = run_episode(env, 1, acts, options=opts)
    assert a["states"][0].row_index == b["states"][0].row_index
    assert a["states"][0].pattern == b["states"][0].pattern
    assert np.array_equal(a["states"][0].stance, b["states"][0].stance)  # same seed row
    assert a["obs"] != b["obs"]
    assert a["rewards"] != b["rewards"]
    _same(a, c)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_reset_options_fix_dialogue_and_cut(scenario, seeds):
    d = [d for d in seeds if d.scenario == scenario][-1]
    env = GroupSupportEnv(scenario)
    _, info = env.reset(seed=0, options={"dialogue": d.sample_id, "start_row": 7})
    assert env.session.dialogue.sample_id == d.sample_id and env.session.start_row == 7
    assert info["state"].row_index == d.rows[6].row_index
    with pytest.raises(ValueError, match="no seed dialogue"):
        env.reset(seed=0, options={"dialogue": "nope"})


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_seeded_starts_cover_several_dialogues_and_cuts(scenario):
    env = GroupSupportEnv(scenario, min_prefix=2)
    starts = set()
    for seed in range(40):
        env.reset(seed=seed)
        s = env.session
        assert 2 <= s.start_row < len(s.dialogue.rows)
        starts.add((s.dialogue.sample_id, s.start_row))
    assert len({sid for sid, _ in starts}) == len(env.dialogues)
    assert len(starts) > 20


def test_info_state_is_a_copy():
    env = GroupSupportEnv("couple")
    _, info = env.reset(seed=0)
    live = env.state.distress.copy(), env.state.pattern
    info["state"].distress[:] = live[0] + 0.25
    info["state"].pattern = "no such pattern"
    assert env.state is not info["state"]
    np.testing.assert_array_equal(env.state.distress, live[0])
    assert env.state.pattern == live[1]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_recording_the_transcript_does_not_change_the_episode(scenario, run_episode):
    acts = _actions(scenario)
    quiet = run_episode(GroupSupportEnv(scenario, horizon=20, terminate_on_settle=False), 11, acts)
    loud = run_episode(GroupSupportEnv(scenario, horizon=20, terminate_on_settle=False, record_transcript=True), 11, acts)
    assert quiet["obs"] == loud["obs"]
    assert quiet["rewards"] == loud["rewards"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_parallel_env_same_seed_same_episode(scenario):
    def play(seed: int):
        par = parallel_env(scenario=scenario, horizon=12, terminate_on_settle=False, record_transcript=True)
        obs, _ = par.reset(seed=seed)
        trace = []
        t = 0
        while par.agents:
            acts = _actions(scenario)
            obs, rew, term, trunc, infos = par.step({"therapist": acts[t % len(acts)]})
            t += 1
            trace.append(
                (
                    sorted(rew.items()),
                    obs["therapist"]["observation"]["distress"].tobytes(),
                    [r.to_dict() for r in infos["therapist"]["rows"]],
                )
            )
        return trace

    assert play(5) == play(5)
    assert play(5) != play(6)
