"""The native SB3 VecEnv: what an SB3 user relies on (spaces, seeding, auto-reset infos,
masks for MaskablePPO, attribute access, clear errors), and the same episodes as
``DummyVecEnv`` over the Gymnasium env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
from stable_baselines3.common.vec_env import VecNormalize

import rescue_env
from rescue_env.envs import GroupSupportVecEnv
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.reward import RewardConfig

SCENARIOS = ("couple", "family")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_spaces_are_the_flattened_dict_spaces(scenario):
    venv = GroupSupportVecEnv(scenario, num_envs=3, seed=0)
    env = GroupSupportEnv(scenario)
    assert venv.observation_space == spaces.flatten_space(env.observation_space)
    assert venv.action_space == env.action_space
    obs = venv.reset()
    assert obs.shape == (3, *venv.observation_space.shape) and obs.dtype == np.float32
    assert all(venv.observation_space.contains(o) for o in obs)
    # the Gym env's Dict observation, flattened, is the same vector
    o, _ = env.reset(seed=0)
    assert np.array_equal(spaces.flatten(env.observation_space, o), obs[0])
    assert np.array_equal(env.observer.flatten(o), obs[0])


def test_seeding_reproduces_and_auto_reset_reports_episodes():
    def play(seed):
        venv = GroupSupportVecEnv("couple", num_envs=2, seed=seed, horizon=6, terminate_on_settle=False)
        out = [venv.reset()]
        infos = []
        for _ in range(6):
            obs, rewards, dones, info = venv.step(np.zeros(2, dtype=np.int64))
            out += [obs, rewards, dones]
            infos.append(info)
        return out, infos

    a, infos = play(3)
    b, _ = play(3)
    c, _ = play(4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))
    assert all(info == {} for step in infos[:-1] for info in step)
    last = infos[-1][0]
    assert last["TimeLimit.truncated"] is True  # the horizon cut it: SB3 bootstraps the value
    rewards_env0 = [float(r[0]) for r in a[2::3]]
    assert last["episode"]["l"] == 6 and last["episode"]["r"] == pytest.approx(sum(rewards_env0), abs=1e-5)
    assert last["episode_stats"]["steps"] == 6 and "sigma_return" in last
    assert last["terminal_observation"].shape == (GroupSupportVecEnv("couple", num_envs=1).observation_space.shape[0],)


def test_reset_options_fix_the_dialogue_and_cut(seed_dialogues):
    couple = [d for d in seed_dialogues if d.scenario == "couple"][1]
    venv = GroupSupportVecEnv("couple", num_envs=2, seed=0)
    venv.set_options({"dialogue": couple.sample_id, "start_row": 4})
    venv.reset()
    stats = venv.env_method("episode_stats")
    assert [(s["seed_dialogue"], s["start_row"]) for s in stats] == [(couple.sample_id, 4)] * 2


def test_masks_for_maskable_ppo(seed_dialogues):
    small = min((d for d in seed_dialogues if d.scenario == "family"), key=lambda d: len(d.participants))
    venv = GroupSupportVecEnv("family", num_envs=2, seed=0, data_path=[small])
    venv.reset()
    assert is_masking_supported(venv)
    masks = get_action_masks(venv)
    assert masks.shape == (2, venv.action_space.n) and masks.dtype == bool
    assert np.array_equal(masks, venv.action_masks())
    assert np.array_equal(masks[0], GroupSupportEnv("family", data_path=[small]).encoding.mask(len(small.participants)).astype(bool))
    assert not masks[0].all()  # targets naming absent members are masked


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_maskable_ppo_trains_and_predicts_on_it(scenario):
    venv = GroupSupportVecEnv(scenario, num_envs=2, seed=0)
    model = MaskablePPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu", policy_kwargs={"net_arch": [16]})
    model.learn(256)
    assert model.num_timesteps >= 256
    obs = venv.reset()
    actions, _ = model.predict(obs, action_masks=venv.action_masks(), deterministic=True)
    assert venv.action_masks()[np.arange(2), actions].all()
    # SB3's wrappers stack on it as on any VecEnv
    VecNormalize(venv).reset()


def test_attributes_and_methods_see_the_live_sessions():
    venv = GroupSupportVecEnv("couple", num_envs=2, seed=1, terminate_on_settle=False)
    venv.reset()
    for _ in range(3):
        venv.step(np.array([1, 0]))
    stats = venv.env_method("episode_stats")
    assert [s["steps"] for s in stats] == [3, 3] and [s["interventions"] for s in stats] == [3, 0]
    assert venv.get_attr("scenario") == ["couple", "couple"]
    # a setting every session shares takes effect through set_attr
    venv.set_attr("horizon", 4)
    _, _, dones, infos = venv.step(np.array([0, 0]))
    assert dones.all() and infos[0]["TimeLimit.truncated"]
    with pytest.raises(ValueError, match="shared"):
        venv.set_attr("horizon", 5, indices=[0])
    with pytest.raises(AttributeError, match="note"):
        venv.set_attr("note", "x")
    with pytest.raises(AttributeError, match="session"):
        venv.get_attr("session")


def test_reward_weights_set_through_the_vec_api_reach_the_core():
    """The weights a user sets are the ones the core books (the reference's DummyVecEnv
    gets the same new config and gives the same rewards)."""
    fast, ref = _pair()
    for venv in (fast, ref):
        venv.set_attr("reward_cfg", RewardConfig(lam=5.0))
    i_fast, i_ref = _same_step(fast, ref, np.array([0, 3]))
    with pytest.raises(Exception, match="cannot assign"):
        fast.get_attr("reward_cfg")[0].lam = 1.0


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_same_episodes_as_dummy_vec_env(scenario):
    fast, ref = _pair(scenario, n=3, seed=11)
    rng = np.random.default_rng(0)
    ended = 0
    for t in range(80):
        masks = fast.action_masks()
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        i_fast, i_ref = _same_step(fast, ref, actions)
        for a, b in zip(i_fast, i_ref):
            if "terminal_observation" in a:
                ended += 1
                space = ref.envs[0].observation_space
                assert np.array_equal(a["terminal_observation"], spaces.flatten(space, b["terminal_observation"]))
                assert a["sigma_return"] == b["sigma_return"] and a["episode_stats"] == b["episode_stats"]
    assert ended >= 3


def test_clear_errors():
    with pytest.raises(ValueError, match="num_envs"):
        GroupSupportVecEnv("couple", num_envs=0)
    with pytest.raises(ValueError, match="transcripts"):
        GroupSupportVecEnv("couple", num_envs=2, record_transcript=True)
    with pytest.raises(ValueError, match="scenario"):
        GroupSupportVecEnv("triad", num_envs=2)
    venv = GroupSupportVecEnv("couple", num_envs=2, seed=0)
    with pytest.raises(RuntimeError, match="reset"):
        venv.step(np.array([0, 0]))
    venv.reset()
    with pytest.raises(ValueError, match="outside"):
        venv.step(np.array([0, 31]))
    with pytest.raises(ValueError, match="integer actions"):
        venv.step(np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="integer actions"):
        venv.step(np.array([0, 1, 2]))


def test_gym_env_final_info_leaves_episode_to_the_wrappers():
    # gymnasium's RecordEpisodeStatistics (and SB3's Monitor) own info["episode"]
    env = gym.wrappers.RecordEpisodeStatistics(gym.make("rescue_env/Couple-v0", horizon=3, terminate_on_settle=False))
    env.reset(seed=0)
    for _ in range(3):
        _, _, term, trunc, info = env.step(0)
    assert trunc and info["episode"]["l"] == 3 and info["episode_stats"]["steps"] == 3
    assert rescue_env.__version__


def _pair(scenario="couple", n=2, seed=4, **kwargs):
    from stable_baselines3.common.vec_env import DummyVecEnv

    fast = GroupSupportVecEnv(scenario, num_envs=n, seed=seed, **kwargs)
    ref = DummyVecEnv([lambda: GroupSupportEnv(scenario, **kwargs) for _ in range(n)])
    ref.seed(seed)
    fast.reset(), ref.reset()
    return fast, ref


def _same_step(fast, ref, actions):
    space = ref.envs[0].observation_space
    o1, r1, d1, i1 = fast.step(actions)
    o2, r2, d2, i2 = ref.step(actions)
    assert np.array_equal(o1, np.stack([spaces.flatten(space, {k: v[i] for k, v in o2.items()}) for i in range(len(actions))]))
    assert np.array_equal(r1, r2) and np.array_equal(d1, d2)
    return i1, i2


def test_only_the_calibrated_model_runs_batched():
    with pytest.raises(ValueError, match="calibrated"):
        GroupSupportVecEnv("couple", num_envs=2, dynamics=object())
