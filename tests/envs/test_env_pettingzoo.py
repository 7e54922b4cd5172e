"""The PettingZoo view: user-driven clients, backend-filled clients, masks, AEC (item 11)."""

from __future__ import annotations

import numpy as np
import pytest

from rescue_env import env as aec_env
from rescue_env import parallel_env, raw_env
from rescue_env.data import THERAPIST
from rescue_env.dynamics import TO_GROUP, TO_THERAPIST, Behaviour
from rescue_env.taxonomy.labels import UTTERANCE_TYPES


def _reset(scenario="couple", seed=0, **kw):
    par = parallel_env(scenario=scenario, record_transcript=True, terminate_on_settle=False, **kw)
    obs, infos = par.reset(seed=seed)
    return par, obs, infos


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_agents_and_client_names(scenario):
    par, obs, infos = _reset(scenario)
    n = par.session.n
    assert par.agents == ["therapist"] + [f"client_{i}" for i in range(n)]
    assert [infos[f"client_{i}"]["name"] for i in range(n)] == list(par.session.members)
    for i in range(n):
        me = obs[f"client_{i}"]["observation"]["self"]
        assert me[i] == 1.0 and me.sum() == 1.0


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_all_clients_silent_gives_no_client_rows(scenario):
    par, _, _ = _reset(scenario, horizon=8)
    enc = par.encoding
    t = 0
    while par.agents:
        acts = {a: 0 for a in par.agents}
        acts["therapist"] = enc.encode(0, 1) if t % 2 == 0 else 0
        _, _, _, _, infos = par.step(acts)
        rows = infos["therapist"]["rows"]
        assert all(r.primary_speaker == THERAPIST for r in rows)
        assert len(rows) == (t % 2 == 0)
        t += 1
    assert t == 8


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_missing_client_actions_are_filled_by_the_backend(scenario):
    par, _, _ = _reset(scenario, horizon=10)
    spoken = 0
    while par.agents:
        _, _, _, _, infos = par.step({"therapist": 0})
        client_rows = [r for r in infos["therapist"]["rows"] if not r.is_therapist]
        assert 1 <= len(client_rows) <= 2  # the calibrated client policy always has someone speak
        spoken += len(client_rows)
    assert spoken >= 10


def test_user_driven_client_action_is_used():
    par, _, _ = _reset("couple", horizon=30)
    a, b = par.session.members
    accuse = par.client_action("accusation", 1)
    steps = 0
    while par.agents:
        _, _, _, _, infos = par.step({"therapist": 0, "client_0": accuse, "client_1": 0})
        rows = infos["therapist"]["rows"]
        assert len(rows) == 1
        (r,) = rows
        assert (r.primary_speaker, r.utterance_type, r.target) == (a, "accusation", [b])
        assert [v.target for v in r.viewpoints_attitudes] == [b]
        steps += 1
    assert steps == 30


def test_partially_driven_clients_mix_user_and_backend():
    par, _, _ = _reset("family", seed=1, horizon=12)
    n = par.session.n
    to_therapist = par.client_action("request", TO_THERAPIST)
    seen_other = False
    while par.agents:
        _, _, _, _, infos = par.step({"therapist": 0, "client_0": to_therapist})
        rows = [r for r in infos["therapist"]["rows"] if not r.is_therapist]
        mine = [r for r in rows if r.primary_speaker == par.session.members[0]]
        assert len(mine) == 1 and mine[0].utterance_type == "request" and mine[0].target == [THERAPIST]
        seen_other |= any(r.primary_speaker != par.session.members[0] for r in rows)
    assert n > 2 and seen_other  # undriven slots are still played by the backend


def test_client_actions_move_the_state():
    """Same seed (same clients): an accusation toward B leaves B more distressed and colder
    toward A than a repair toward B does — for every seed, by a clear margin on average."""
    gaps, colder = [], []
    for seed in range(4, 8):
        results = {}
        for kind in ("accusation", "repair"):
            par, _, _ = _reset("couple", seed=seed, horizon=5)
            act = par.client_action(kind, 1)
            while par.agents:
                _, _, _, _, infos = par.step({"therapist": 0, "client_0": act, "client_1": 0})
            results[kind] = infos["therapist"]["state"]
        gaps.append(results["accusation"].distress[1] - results["repair"].distress[1])
        colder.append(results["repair"].stance[1, 0] - results["accusation"].stance[1, 0])
    assert min(gaps) > 0.05 and np.mean(gaps) > 0.1
    assert min(colder) > 0.2


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_client_action_encoding_round_trips(scenario):
    par, obs, _ = _reset(scenario)
    cap = par.encoding.max_members
    n = par.session.n
    assert par.decode_client_action(0) is None
    for u in range(len(UTTERANCE_TYPES)):
        for addressee in [*range(cap), TO_THERAPIST, TO_GROUP]:
            a = par.client_action(UTTERANCE_TYPES[u], addressee)
            assert par.decode_client_action(a) == Behaviour(u, addressee)
            assert 0 < a < par.action_space("client_0").n
    for i in range(n):
        mask = obs[f"client_{i}"]["action_mask"]
        assert mask[0] == 1
        assert mask[par.client_action("accusation", i)] == 0  # not to oneself
        assert mask[par.client_action("accusation", TO_THERAPIST)] == 1
        assert mask[par.client_action("accusation", TO_GROUP)] == int(n > 1)
        for j in range(cap):
            assert mask[par.client_action("repair", j)] == int(j < n and j != i)


@pytest.mark.parametrize("bad", ["self", "absent"])
def test_masked_client_action_is_silence(bad, small_family):
    par = parallel_env(scenario="family", record_transcript=True, horizon=4)
    par.reset(seed=0, options={"dialogue": small_family.sample_id, "start_row": 6})
    n = par.session.n
    assert n < par.encoding.max_members
    action = {
        "self": par.client_action("accusation", 0),
        "absent": par.client_action("accusation", n),
    }[bad]
    acts = {"therapist": 0, "client_0": action} | {f"client_{i}": 0 for i in range(1, n)}
    _, _, _, _, infos = par.step(acts)
    assert infos["therapist"]["rows"] == []  # client_0's masked action played as silence


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_backend_filled_clients_reproduce_the_gym_episode(scenario):
    from rescue_env.envs.gym_env import GroupSupportEnv

    g = GroupSupportEnv(scenario, horizon=30, terminate_on_settle=False)
    p = parallel_env(scenario=scenario, horizon=30, terminate_on_settle=False)
    acts = [0, 1, 5, 0, 12]
    for seed in range(30):
        g.reset(seed=seed)
        p.reset(seed=seed)
        for t in range(30):
            _, r, _, _, gi = g.step(acts[t % 5])
            _, pr, _, _, pi = p.step({"therapist": acts[t % 5]})
            assert r == pr["therapist"], (seed, t)
            assert gi["state"] == pi["therapist"]["state"], (seed, t)


def test_therapist_action_required_and_unknown_agents_rejected():
    par, _, _ = _reset("couple")
    with pytest.raises(ValueError, match="therapist"):
        par.step({"client_0": 0})
    with pytest.raises(ValueError, match="client_5"):
        par.step({"therapist": 0, "client_5": 0})


def test_episode_end_clears_agents_and_reports_return():
    par, _, _ = _reset("couple", horizon=3)
    for t in range(3):
        obs, rew, term, trunc, infos = par.step({"therapist": 0})
        assert set(trunc) == {"therapist", "client_0", "client_1"}
        assert all(v == (t == 2) for v in trunc.values())
        assert not any(term.values())
    assert par.agents == []
    assert "sigma_return" in infos["therapist"] and infos["therapist"]["episode_stats"]["steps"] == 3
    with pytest.raises(RuntimeError):
        par.step({"therapist": 0})


def test_parallel_state_vector():
    par, obs, _ = _reset("family")
    vec = par.state()
    assert vec.ndim == 1 and vec.dtype == np.float32
    assert vec.size == sum(int(np.prod(s.shape)) for s in par.observer.space.spaces.values())


@pytest.mark.parametrize("factory", [aec_env, raw_env], ids=["env", "raw_env"])
@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_aec_random_game_runs_to_the_end(factory, scenario):
    e = factory(scenario=scenario, horizon=7, terminate_on_settle=False)
    e.reset(seed=3)
    rng = np.random.default_rng(0)
    n_agents = len(e.agents)
    iterations = 0
    therapist_moves = 0
    therapist_return = 0.0
    for agent in e.agent_iter(max_iter=10_000):
        obs, reward, term, trunc, info = e.last()
        if agent == "therapist":
            therapist_return += reward
        if term or trunc:
            action = None
        else:
            mask = obs["action_mask"]
            assert e.observation_space(agent)["action_mask"].contains(mask)
            action = int(rng.choice(np.flatnonzero(mask)))
            therapist_moves += agent == "therapist"
        e.step(action)
        iterations += 1
    assert e.agents == []
    assert therapist_moves == 7
    assert iterations == 8 * n_agents  # 7 moves each, then one last() per agent to see the end
    assert therapist_return != 0.0  # the σ* rewards reached the AEC view


@pytest.mark.parametrize(
    "agent,action,message",
    [
        ("client_0", 10_000, "out of range: Discrete"),
        ("client_0", -1, "out of range: Discrete"),
        ("client_0", 2.5, "not an integer in Discrete"),
        ("therapist", 2.5, "not an integer in Discrete"),
        ("therapist", 10_000, r"out of range: Discrete\(31\) takes 0..30"),
    ],
)
def test_out_of_range_or_non_integer_actions_raise(agent, action, message):
    par = parallel_env(scenario="couple", horizon=4)
    par.reset(seed=0)
    with pytest.raises(ValueError, match=message):
        par.step({"therapist": 0, agent: action})
