"""The batched kernel is the reference, faster: bit-equal episodes on both scenarios.

Each case runs ``GroupSupportVecEnv`` (kernel) and SB3's ``DummyVecEnv`` over the same
``GroupSupportEnv`` sessions (the Python reference) on the same seeds and actions, and
compares every observation, reward, episode end, terminal observation and end-of-episode
statistic exactly, then the live state of each session.
"""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.vec_env import DummyVecEnv

from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.envs.vec_env import GroupSupportVecEnv

CASES = {
    "couple-defaults": ("couple", {}),
    "family-defaults": ("family", {}),
    # lam = 0 takes the book's other branch for the worst-off distress; no settling end
    "couple-no-bucket-no-settle": ("couple", {"reward": {"lam": 0.0, "beta": 1.0, "cost": 0.2}, "terminate_on_settle": False, "horizon": 12}),
    # a low settle threshold and a family cap below the largest family (members left out)
    "family-cap-4": ("family", {"max_members": 4, "settle_threshold": 0.5, "settle_steps": 1, "horizon": 20}),
}


def flat(space: spaces.Dict, obs: dict, i: int | None = None) -> np.ndarray:
    return spaces.flatten(space, obs if i is None else {k: v[i] for k, v in obs.items()})


@pytest.mark.parametrize("case", list(CASES))
def test_kernel_matches_the_reference_bit_for_bit(case):
    scenario, kwargs = CASES[case]
    n_envs, steps = 4, 400
    fast = GroupSupportVecEnv(scenario, num_envs=n_envs, seed=11, **kwargs)
    assert fast._kernel is not None
    ref = DummyVecEnv([lambda: GroupSupportEnv(scenario, **kwargs) for _ in range(n_envs)])
    ref.seed(11)
    space = ref.envs[0].observation_space
    o_fast, o_ref = fast.reset(), ref.reset()
    assert np.array_equal(o_fast, np.stack([flat(space, o_ref, i) for i in range(n_envs)]))
    rng = np.random.default_rng(0)
    n_actions = fast.action_space.n
    ended = 0
    for t in range(steps):
        # every action, masked ones included: those play as listening and count as invalid
        actions = rng.integers(0, n_actions, n_envs)
        o_fast, r_fast, d_fast, i_fast = fast.step(actions)
        o_ref, r_ref, d_ref, i_ref = ref.step(actions)
        assert np.array_equal(o_fast, np.stack([flat(space, o_ref, i) for i in range(n_envs)])), t
        assert np.array_equal(r_fast, r_ref) and np.array_equal(d_fast, d_ref), t
        for i in np.flatnonzero(d_ref):
            ended += 1
            assert np.array_equal(i_fast[i]["terminal_observation"], flat(space, i_ref[i]["terminal_observation"]))
            assert i_fast[i]["TimeLimit.truncated"] == i_ref[i]["TimeLimit.truncated"]
            assert i_fast[i]["sigma_return"] == i_ref[i]["sigma_return"]
            assert i_fast[i]["episode_stats"] == i_ref[i]["episode_stats"]
    assert ended >= n_envs  # the comparison crossed episode ends and auto-resets
    # mid-episode, the live sessions read through the VecEnv equal the reference's
    for got, want in zip(fast.get_attr("state"), ref.get_attr("state")):
        assert got == want
    assert [s.t for s in fast.get_attr("session")] == [s.t for s in ref.get_attr("session")]


def test_invalid_actions_are_counted_like_the_reference(seed_dialogues):
    # the smallest family under a cap of 6: most targets are masked
    small_family = min((d for d in seed_dialogues if d.scenario == "family"), key=lambda d: len(d.participants))
    kwargs = {"data_path": [small_family], "horizon": 8, "terminate_on_settle": False}
    fast = GroupSupportVecEnv("family", num_envs=2, seed=5, **kwargs)
    ref = DummyVecEnv([lambda: GroupSupportEnv("family", **kwargs) for _ in range(2)])
    ref.seed(5)
    fast.reset(), ref.reset()
    masked = int(np.flatnonzero(fast.action_masks()[0] == 0)[0])
    for _ in range(8):
        _, _, dones, i_fast = fast.step(np.array([masked, masked]))
        _, _, _, i_ref = ref.step(np.array([masked, masked]))
    assert dones.all()
    assert i_fast[0]["episode_stats"]["invalid_actions"] == i_ref[0]["episode_stats"]["invalid_actions"] == 8
    assert i_fast[0]["episode_stats"]["interventions"] == 0
