"""The Gymnasium/PettingZoo/SB3 contracts a user of those libraries relies on, for every
adapter over the one simulator core: registration, the batched path through ``make_vec``,
masks through the wrapper stack, misuse refused with a clear error, ``close``."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.test import state_test

import rescue_env  # noqa: F401  (registers the ids)
from rescue_env import parallel_env, raw_env
from rescue_env.envs import GroupSupportEnv, GroupSupportVecEnv, GroupSupportVectorEnv, ResetNeeded

SCENARIOS = ("couple", "family")
ENV_IDS = {"couple": "rescue_env/Couple-v0", "family": "rescue_env/Family-v0"}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_spec_leaves_truncation_to_the_env_and_sets_the_vector_entry_point(scenario):
    spec = gym.spec(ENV_IDS[scenario])
    assert spec.max_episode_steps is None  # one owner of truncation: the env, at its horizon
    assert spec.vector_entry_point is not None
    envs = gym.make_vec(ENV_IDS[scenario], num_envs=3, vectorization_mode="vector_entry_point")
    assert isinstance(envs, GroupSupportVectorEnv) and envs.num_envs == 3


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_vector_entry_point_and_sync_give_the_same_episodes(scenario):
    fast = gym.make_vec(ENV_IDS[scenario], num_envs=4, vectorization_mode="vector_entry_point")
    sync = gym.make_vec(ENV_IDS[scenario], num_envs=4, vectorization_mode="sync")
    assert fast.single_observation_space == sync.single_observation_space
    assert fast.observation_space == sync.observation_space and fast.action_space == sync.action_space
    of, inf_f = fast.reset(seed=7)
    os_, inf_s = sync.reset(seed=7)
    rng = np.random.default_rng(0)
    ends = 0
    for t in range(75):  # past two horizons: auto-resets on both sides
        assert all(np.array_equal(of[k], os_[k]) for k in of), t
        assert np.array_equal(inf_f["action_mask"], inf_s["action_mask"])
        assert np.array_equal(fast.action_masks(), inf_s["action_mask"].astype(bool))
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in inf_f["action_mask"]])
        of, rf, tf, uf, inf_f = fast.step(actions)
        os_, rs, ts, us, inf_s = sync.step(actions)
        assert np.array_equal(rf, rs) and np.array_equal(tf, ts) and np.array_equal(uf, us), t
        ends += int((tf | uf).sum())
        if (tf | uf).any():
            done = np.flatnonzero(tf | uf)
            assert np.allclose(inf_f["sigma_return"][done], inf_s["sigma_return"][done])
    assert ends >= 4


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_make_with_a_horizon_plays_that_many_steps(scenario):
    env = gym.make(ENV_IDS[scenario], horizon=50, terminate_on_settle=False)
    env.reset(seed=0)
    for t in range(50):
        _, _, term, trunc, _ = env.step(0)
        assert trunc == (t == 49) and not term, t


def test_make_vec_with_another_horizon_truncates_there_and_refuses_a_disagreeing_limit():
    with pytest.raises(ValueError, match="pass horizon=8"):
        gym.make_vec(ENV_IDS["couple"], num_envs=2, vectorization_mode="vector_entry_point", max_episode_steps=8, terminate_on_settle=False)
    envs = gym.make_vec(ENV_IDS["couple"], num_envs=2, vectorization_mode="vector_entry_point", horizon=8, terminate_on_settle=False)
    envs.reset(seed=0)
    for t in range(8):
        _, _, term, trunc, _ = envs.step(np.zeros(2, np.int64))
        assert trunc.all() == (t == 7) and not term.any()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_masks_reachable_through_the_wrapper_stack(scenario):
    env = gym.make(ENV_IDS[scenario])
    _, info = env.reset(seed=0)
    masks = env.unwrapped.action_masks()
    assert np.array_equal(masks, info["action_mask"].astype(bool))
    assert np.array_equal(env.get_wrapper_attr("action_masks")(), masks)
    factored = env.get_wrapper_attr("action_mask_factored")()
    assert [len(m) for m in factored][1:] == [env.unwrapped.encoding.n_targets, env.unwrapped.encoding.n_strategies]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_stepping_after_the_end_without_reset_raises(scenario):
    env = GroupSupportEnv(scenario, horizon=2, terminate_on_settle=False)
    with pytest.raises(ResetNeeded, match="reset"):
        env.step(0)
    env.reset(seed=0)
    env.step(0)
    *_, trunc, _ = env.step(0)
    assert trunc
    with pytest.raises(ResetNeeded, match="ended"):
        env.step(0)
    env.reset()
    env.step(0)  # a reset starts the next episode
    par = parallel_env(scenario=scenario, horizon=1)
    par.reset(seed=0)
    par.step({"therapist": 0})
    assert par.agents == []
    with pytest.raises(RuntimeError, match="reset"):
        par.step({"therapist": 0})


@pytest.mark.parametrize("bad", [2.5, -1, 31, "1", None, np.array([1, 2])])
def test_bad_actions_raise_in_every_adapter(bad):
    env = GroupSupportEnv("couple")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="Discrete"):
        env.step(bad)
    par = parallel_env(scenario="couple")
    par.reset(seed=0)
    with pytest.raises(ValueError, match="Discrete"):
        par.step({"therapist": bad})
    vec = GroupSupportVectorEnv(2, "couple")
    vec.reset(seed=0)
    with pytest.raises(ValueError, match="Discrete|integer actions"):
        vec.step(np.array([0, bad], dtype=object) if not isinstance(bad, np.ndarray) else np.array([[1, 2], [3, 4]]))
    sb3 = GroupSupportVecEnv("couple", num_envs=2, seed=0)
    sb3.reset()
    with pytest.raises(ValueError, match="Discrete|integer actions"):
        sb3.step(np.array([0, bad], dtype=object) if not isinstance(bad, np.ndarray) else np.array([[1, 2], [3, 4]]))


def test_numpy_integer_actions_are_accepted():
    env = GroupSupportEnv("couple")
    env.reset(seed=0)
    env.step(np.int64(3))
    env.step(np.array(0))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_pettingzoo_state_test_and_state_space(scenario):
    par = parallel_env(scenario=scenario)
    state_test(raw_env(scenario=scenario), par)
    par.reset(seed=0)
    assert par.state_space.contains(par.state())
    assert par.metadata["render_fps"] > 0
