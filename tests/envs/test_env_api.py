"""API conformance of the Gymnasium and PettingZoo environments (issue 3, "Done when" 1)."""

from __future__ import annotations

import dataclasses
import inspect
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import rescue_env
from rescue_env import env as aec_env
from rescue_env import parallel_env, raw_env
from rescue_env.dynamics import DynamicsParams
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.envs.pz_env import GroupSupportParallelEnv
from rescue_env.taxonomy.actions import ActionEncoding

SCENARIOS = ("couple", "family")
ENV_IDS = {"couple": "rescue_env/Couple-v0", "family": "rescue_env/Family-v0"}


# --- Gymnasium ---------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_gymnasium_check_env_with_determinism_checks(scenario):
    env = gym.make(ENV_IDS[scenario])
    # check_env runs Gymnasium's reset-seed and step determinism checks on the unwrapped env
    with warnings.catch_warnings():
        warnings.simplefilter("error", category=UserWarning)
        gym_check_env(env.unwrapped)
    env.close()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_gymnasium_check_env_renders(scenario):
    env = gym.make(ENV_IDS[scenario], render_mode="rgb_array", horizon=5)
    # render checks included: this mode, then every other mode through the env's spec
    gym_check_env(env.unwrapped)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_sb3_check_env(scenario):
    env = GroupSupportEnv(scenario)
    with warnings.catch_warnings():
        # SB3 warns that the (N, N) stance Box is not 1-D; MultiInputPolicy handles it.
        warnings.simplefilter("error", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*unconventional shape.*")
        sb3_check_env(env, warn=True)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_gym_make_ids_spaces_and_kwargs(scenario):
    enc = ActionEncoding(scenario)
    env = gym.make(ENV_IDS[scenario], horizon=4, terminate_on_settle=False)
    assert env.unwrapped.scenario == scenario
    assert env.action_space == gym.spaces.Discrete(enc.n_actions)
    assert env.action_space.n == {"couple": 31, "family": 177}[scenario]
    assert isinstance(env.observation_space, gym.spaces.Dict)
    for key, space in env.observation_space.spaces.items():
        assert isinstance(space, gym.spaces.Box), key  # single level Dict of Boxes
        assert space.dtype == np.float32
    cap = enc.max_members
    assert env.observation_space["distress"].shape == (cap,)
    assert env.observation_space["stance"].shape == (cap, cap)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    steps = 0
    while True:
        obs, r, term, trunc, info = env.step(0)
        steps += 1
        assert env.observation_space.contains(obs)
        if term or trunc:
            break
    assert (steps, trunc, term) == (4, True, False)  # horizon kwarg reached the env
    env.close()


def test_registered_ids_in_registry():
    for scenario, env_id in ENV_IDS.items():
        assert env_id in gym.registry
        assert gym.registry[env_id].kwargs == {"scenario": scenario}
    rescue_env.register_envs()  # idempotent
    assert sum(1 for k in gym.registry if k.startswith("rescue_env/")) == 2


def test_invalid_constructor_arguments():
    with pytest.raises(ValueError, match="scenario"):
        GroupSupportEnv("triad")
    with pytest.raises(ValueError, match="horizon"):
        GroupSupportEnv("couple", horizon=0)
    with pytest.raises(ValueError, match="render_mode"):
        GroupSupportEnv("couple", render_mode="human")
    with pytest.raises(ValueError, match="max_members"):
        GroupSupportEnv("couple", max_members=4)
    with pytest.raises(ValueError, match="dynamics"):
        GroupSupportEnv("couple", dynamics="oracle")
    with pytest.raises(ValueError, match="parallel|scenario"):
        parallel_env("triad")


def test_step_before_reset_raises():
    with pytest.raises(RuntimeError, match="reset"):
        GroupSupportEnv("couple").step(0)
    with pytest.raises(RuntimeError, match="reset"):
        parallel_env("couple").step({"therapist": 0})


# --- PettingZoo --------------------------------------------------------------------------
# A family smaller than the cap has fewer live clients than possible_agents (documented);
# the parallel test notes that as a warning.
@pytest.mark.filterwarnings("ignore:No agents present:UserWarning")
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_parallel_api_test(scenario):
    parallel_api_test(parallel_env(scenario=scenario), num_cycles=200)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_parallel_seed_test(scenario):
    parallel_seed_test(lambda: parallel_env(scenario=scenario), num_cycles=100)


# api_test's style recommendations (Dict observations, agent names, per-agent space sizes)
@pytest.mark.filterwarnings("ignore::UserWarning:pettingzoo.test.api_test")
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_aec_api_test(scenario):
    api_test(aec_env(scenario=scenario), num_cycles=100)


def test_the_env_settings_and_inputs_are_listed_once():
    """Every constructor takes the EnvSpec fields (the EnvConfig settings and the inputs) as
    keywords and lists none of them itself; an unknown name is refused by name."""
    from rescue_env.config import EnvConfig, EnvSpec
    from rescue_env.envs import GroupSupportVecEnv, GroupSupportVectorEnv

    names = {f.name for f in dataclasses.fields(EnvConfig)} | {f.name for f in dataclasses.fields(EnvSpec)}
    for ctor in (GroupSupportEnv, GroupSupportVectorEnv, GroupSupportVecEnv, GroupSupportParallelEnv):
        named = set(inspect.signature(ctor.__init__).parameters)
        assert not (named & (names - {"scenario"})), ctor
    spec = EnvSpec.of("family", horizon=7, heterogeneity=0.5)
    assert GroupSupportEnv(spec=spec).config == spec.config and GroupSupportEnv(spec=spec).core.heterogeneity == 0.5
    with pytest.raises(ValueError, match="heterogeneity"):
        GroupSupportEnv("couple", heterogeneity=-1.0)
    for make in (lambda: GroupSupportParallelEnv("couple", horizn=3), lambda: GroupSupportEnv("couple", horizn=3)):
        with pytest.raises(TypeError, match="horizn"):
            make()
    cfg = EnvConfig(scenario="family", horizon=7, max_members=5)
    assert GroupSupportEnv(config=cfg).config == cfg
    assert GroupSupportEnv(config=cfg, horizon=9).horizon == 9


@pytest.mark.parametrize("factory", [parallel_env, raw_env, aec_env], ids=["parallel_env", "raw_env", "env"])
def test_factories_pass_scenario_and_kwargs(factory, seeds):
    family = [d for d in seeds if d.scenario == "family" and len(d.participants) <= 4]
    params = DynamicsParams.load()
    e = factory(
        scenario="family",
        params=params,
        data_path=family,
        horizon=3,
        reward={"lam": 0.0, "gamma": 0.5},
        max_members=4,
        settle_threshold=0.05,
        terminate_on_settle=False,
        record_transcript=True,
        render_mode="ansi",
    )
    par = e.unwrapped  # the AEC wrappers unwrap to the ParallelEnv
    assert isinstance(par, GroupSupportParallelEnv)
    assert par.scenario == "family"
    assert par.encoding.max_members == 4
    assert par.possible_agents == ["therapist", "client_0", "client_1", "client_2", "client_3"]
    assert par.horizon == 3
    assert par.reward_cfg.lam == 0.0 and par.reward_cfg.gamma == 0.5
    assert par.params is params["family"]
    assert [d.sample_id for d in par.dialogues] == [d.sample_id for d in family]
    assert par.record_transcript and not par.config.terminate_on_settle and par.render_mode == "ansi"
    assert par.action_space("therapist").n == ActionEncoding("family", 4).n_actions


def test_factories_default_to_couple():
    assert parallel_env().scenario == "couple"
    assert raw_env().unwrapped.scenario == "couple"
    assert aec_env().unwrapped.scenario == "couple"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_spaces_are_the_same_object_every_call(scenario):
    par = parallel_env(scenario=scenario)
    for agent in par.possible_agents:
        assert par.observation_space(agent) is par.observation_space(agent)
        assert par.action_space(agent) is par.action_space(agent)
    aec = aec_env(scenario=scenario)
    aec.reset(seed=0)
    for agent in aec.possible_agents:
        assert aec.observation_space(agent) is aec.observation_space(agent)
        assert aec.action_space(agent) is aec.action_space(agent)
        assert aec.observation_space(agent) is aec.unwrapped.observation_space(agent)
    g = GroupSupportEnv(scenario)
    assert g.observation_space is g.observation_space


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_parallel_observations_in_spaces_with_masks(scenario):
    par = parallel_env(scenario=scenario, horizon=5)
    obs, infos = par.reset(seed=3)
    assert set(obs) == set(par.agents) == set(infos)
    for agent, o in obs.items():
        assert par.observation_space(agent).contains(o), agent
        assert o["action_mask"].dtype == np.int8
        assert o["action_mask"].shape == (par.action_space(agent).n,)
    n = par.session.n
    np.testing.assert_array_equal(obs["therapist"]["action_mask"], par.encoding.mask(n))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_episode_ends_when_the_group_settles(scenario):
    # every member is always "below" a threshold above 1: settled after settle_steps steps
    env = GroupSupportEnv(scenario, settle_threshold=1.01, settle_steps=3, horizon=30)
    env.reset(seed=0)
    for t in range(3):
        _, _, term, trunc, info = env.step(0)
    assert term and not trunc and info["episode_stats"]["steps"] == 3 and "sigma_return" in info
    # a threshold nobody reaches never terminates; the horizon truncates
    env = GroupSupportEnv(scenario, settle_threshold=0.0, horizon=6)
    env.reset(seed=0)
    for t in range(6):
        _, _, term, trunc, info = env.step(0)
        assert not term and trunc == (t == 5)
    # switched off, settling does not end the episode either
    env = GroupSupportEnv(scenario, settle_threshold=1.01, settle_steps=1, terminate_on_settle=False, horizon=4)
    env.reset(seed=0)
    ends = [env.step(0)[2:4] for _ in range(4)]
    assert ends == [(False, False)] * 3 + [(False, True)]


def test_episode_statistics():
    env = GroupSupportEnv("couple", horizon=8, terminate_on_settle=False)
    enc = env.encoding
    env.reset(seed=1)
    for t in range(8):
        _, _, _, _, info = env.step(enc.encode(0, 0) if t < 3 else 0)
    ep = info["episode_stats"]
    assert ep["steps"] == 8 and ep["interventions"] == 3 and ep["invalid_actions"] == 0
    a, b = env.session.members
    assert ep["untended_turns"] == {a: 5, b: 8}
    assert ep["final_max_distress"] == pytest.approx(info["state"].distress.max())
    assert ep["peak_max_distress"] >= ep["final_max_distress"]
    assert ep["seed_dialogue"] == env.session.dialogue.sample_id


@pytest.mark.parametrize("row", [2.7, "2", True, np.bool_(True), 2.0])
def test_start_row_must_be_an_integer(row):
    env = GroupSupportEnv("couple")
    sample_id = env.dialogues[0].sample_id
    with pytest.raises(ValueError, match="start_row must be an integer"):
        env.reset(seed=0, options={"dialogue": sample_id, "start_row": row})
    env.reset(seed=0, options={"dialogue": sample_id, "start_row": np.int64(2)})
    assert env.session.start_row == 2


@pytest.mark.parametrize("action", [True, False, np.bool_(True), np.bool_(False)])
def test_boolean_actions_are_refused_whatever_their_type(action):
    env = GroupSupportEnv("couple")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="boolean, not an integer"):
        env.step(action)


def test_an_out_of_range_action_names_the_range():
    env = GroupSupportEnv("couple")
    env.reset(seed=0)
    n = env.action_space.n
    for bad in (n, -1, np.int64(n)):
        with pytest.raises(ValueError, match=rf"out of range: Discrete\({n}\) takes 0..{n - 1}"):
            env.step(bad)
    env.step(np.int64(n - 1))  # numpy integers in range are actions


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_observation_shows_the_turn_the_therapist_answers(scenario):
    """``speaker``, ``spoken_to`` and ``utterance`` are the last client turn of the step (the
    transcript's last row), at reset the seed rows' latest client; the state agrees."""
    from rescue_env.data.schema import GROUP_LABELS, THERAPIST
    from rescue_env.taxonomy.labels import UTTERANCE_TYPES

    env = GroupSupportEnv(scenario, record_transcript=True, horizon=12)
    obs, info = env.reset(seed=1)
    st = info["state"]
    assert obs["speaker"].sum() == (st.last_client is not None)
    if st.last_client is not None:
        assert st.members[int(np.argmax(obs["speaker"]))] == st.last_client
    cap = env.observation_space["speaker"].shape[0]
    assert env.observation_space["spoken_to"].shape == (cap + 2,) and env.observation_space["utterance"].shape == (len(UTTERANCE_TYPES),)
    rng = np.random.default_rng(0)
    for _ in range(12):
        action = int(rng.choice(np.flatnonzero(info["action_mask"])))
        obs, _, term, trunc, info = env.step(action)
        st, row = info["state"], info["rows"][-1]
        assert env.observation_space.contains(obs)
        assert row.primary_speaker in st.members and st.last_client == row.primary_speaker
        assert obs["speaker"].tolist() == [float(m == row.primary_speaker) for m in st.members] + [0.0] * (cap - st.n)
        names = [*st.members, *[None] * (cap - st.n), THERAPIST, GROUP_LABELS[scenario]]
        assert {names[i] for i in np.flatnonzero(obs["spoken_to"])} == set(row.target) == set(st.last_addressee)
        assert obs["utterance"].tolist() == [float(u == row.utterance_type) for u in UTTERANCE_TYPES]
        # the therapist's own last move: this step's when it spoke, else the one before
        strategies = env.unwrapped.encoding.strategy_names
        assert obs["last_strategy"].tolist() == [float(x == st.last_strategy) for x in strategies]
        assert obs["last_target"].tolist() == [float(m in st.last_target) for m in st.members] + [0.0] * (cap - st.n)
        if info["intervened"]:
            assert st.last_strategy == strategies[env.unwrapped.encoding.decode(action).strategy]
        if term or trunc:
            break
