"""The native SB3 VecEnv: what an SB3 user relies on (spaces, seeding, auto-reset infos,
masks for MaskablePPO, attribute access, clear errors). Equality with the reference
dynamics is in tests/dynamics/test_batched.py."""

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
    sessions = venv.get_attr("session")
    assert [(s.dialogue.sample_id, s.start_row) for s in sessions] == [(couple.sample_id, 4)] * 2


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
    states = venv.get_attr("state")
    assert [s.n for s in states] == [2, 2]
    assert [s.t for s in venv.get_attr("session")] == [3, 3]
    sessions = venv.get_attr("session")
    assert states[0].untended[0] == 0 and states[0].last_target == (sessions[0].members[0],)
    assert [s.n_interventions for s in sessions] == [3, 0] and [s.streak for s in sessions] == [3, 0]
    assert min(states[1].untended) >= 3
    # a setting the kernel bakes in takes effect through set_attr
    venv.set_attr("horizon", 4)
    _, _, dones, infos = venv.step(np.array([0, 0]))
    assert dones.all() and infos[0]["TimeLimit.truncated"]
    # env_method may change a session: the batched state follows
    venv.env_method("reset", seed=9, indices=[0])
    assert venv.get_attr("session", indices=[0])[0].t == 0


def test_other_backends_and_batched_false_step_the_reference():
    a = GroupSupportVecEnv("couple", num_envs=2, seed=2, batched=False)
    b = GroupSupportVecEnv("couple", num_envs=2, seed=2)
    assert a._kernel is None and b._kernel is not None
    oa, ob = a.reset(), b.reset()
    for t in range(40):
        actions = np.array([t % 31, (3 * t) % 31])
        ra, rb = a.step(actions), b.step(actions)
        assert all(np.array_equal(x, y) for x, y in zip(ra[:3], rb[:3])), t


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


def test_changes_through_the_vec_api_keep_the_reference_episodes():
    fast, ref = _pair(terminate_on_settle=False)
    speak = np.array([1, 1])  # a long streak of interventions
    for _ in range(10):
        _same_step(fast, ref, speak)
    # one env's horizon cut below its streak: the other env keeps its place, the first
    # truncates next step with the tempo of the new horizon, and nothing reads out of bounds
    fast.set_attr("horizon", 3, indices=[0])
    ref.set_attr("horizon", 3, indices=[0])
    assert fast._kernel is None  # horizons now differ: each env steps its reference
    i_fast, _ = _same_step(fast, ref, speak)
    assert i_fast[0]["TimeLimit.truncated"] and i_fast[1] == {}
    fast.set_attr("horizon", 3)
    ref.set_attr("horizon", 3)
    assert fast._kernel is not None
    for _ in range(6):
        _same_step(fast, ref, speak)
    # a change made through the live state is what the next step starts from
    for venv in (fast, ref):
        venv.get_attr("state", indices=[1])[0].distress[:] = 0.9
    _same_step(fast, ref, np.array([0, 0]))
    # a settable attribute the kernel does not use leaves the episodes alone
    fast.set_attr("note", "x", indices=[1])
    _same_step(fast, ref, np.array([0, 4]))


def test_env_method_reset_restarts_the_episode_counters():
    venv = GroupSupportVecEnv("couple", num_envs=2, seed=0, horizon=6, terminate_on_settle=False)
    venv.reset()
    for _ in range(4):
        venv.step(np.array([0, 0]))
    venv.env_method("reset", indices=[0])
    for _ in range(6):
        _, _, dones, infos = venv.step(np.array([0, 0]))
        if dones[0]:
            break
    assert infos[0]["episode"]["l"] == infos[0]["episode_stats"]["steps"] == 6


def test_reset_infos_and_methods_before_reset():
    venv = GroupSupportVecEnv("couple", num_envs=2, seed=0)
    assert venv.env_method("action_masks")[0].all()
    venv.env_method("reset", seed=1)  # before the VecEnv's reset: no batched state to sync
    venv.reset()
    assert all("action_mask" in info and "state" in info for info in venv.reset_infos)
    for _ in range(40):
        _, _, dones, _ = venv.step(np.array([0, 0]))
        if dones.any():
            i = int(np.flatnonzero(dones)[0])
            assert venv.reset_infos[i]["state"].n == 2  # the auto-reset's info
            break
    else:
        pytest.fail("no episode ended in 40 steps")


def test_a_calibrated_subclass_steps_its_own_code():
    from rescue_env.dynamics.calibrated import CalibratedBackend

    class Tweaked(CalibratedBackend):
        pass

    venv = GroupSupportVecEnv("couple", num_envs=2, dynamics=Tweaked("couple"))
    assert venv._kernel is None
