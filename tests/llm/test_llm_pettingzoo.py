"""The PettingZoo ``ParallelEnv`` with LLM-driven client agents (one ``LLMClientPolicy`` per
client slot) and a therapist policy, against the loopback server."""

from __future__ import annotations

import pytest
from llm_episodes import WORDS, varied_responder

from rescue_env.agents.heuristic import HeuristicAgent
from rescue_env.agents.llm import LLMTherapist
from rescue_env import parallel_env
from rescue_env.data import load_dialogues
from rescue_env.llm import run_sync
from rescue_env.llm.backend import LLMBackend, LLMClientPolicy, aclient_actions, client_actions, llm_client_policies
from rescue_env.taxonomy import UTTERANCE_TYPES


@pytest.fixture(scope="module")
def seeds():
    return load_dialogues()


@pytest.fixture(scope="module")
def family(seeds):
    return min((d for d in seeds if d.scenario == "family"), key=lambda d: len(d.participants))


def turn_requests(server, *, speak: bool):
    """Client-turn requests from policies (with a ``speak`` choice) or from the backend."""
    out = []
    for r in server.chat_requests:
        schema = r.body["response_format"]["json_schema"]
        if schema["name"] == "client_turn" and ("speak" in schema["schema"]["properties"]) == speak:
            out.append(r)
    return out


def test_parallel_env_with_llm_client_agents_and_an_llm_therapist(serve, client_for, seeds, family):
    server = serve(varied_responder)
    client = client_for(server)
    env = parallel_env("family", dynamics=LLMBackend("family", client), data_path=[family],
                       horizon=3, record_transcript=True, terminate_on_settle=False)
    obs, infos = env.reset(seed=0)
    members = env.session.members
    policies = llm_client_policies(env)
    assert sorted(policies) == [f"client_{i}" for i in range(len(members))]
    therapist = LLMTherapist("family", env.encoding, client=client)
    therapist.reset(seed=0)
    therapist.attach(env.session)
    steps = 0
    while env.agents:
        actions = client_actions(policies, obs)
        actions["therapist"] = therapist.act(obs["therapist"]["observation"], obs["therapist"]["action_mask"], infos["therapist"]["state"])
        backend_calls = len(turn_requests(server, speak=False))
        env.say(therapist.utterance)
        obs, rewards, terms, truncs, infos = env.step(actions)
        steps += 1
        # every client slot was driven by its policy: the backend asked nobody again
        assert len(turn_requests(server, speak=False)) == backend_calls
        rows = infos["therapist"]["rows"]
        spoke = sorted(members[int(a.removeprefix("client_"))] for a, act in actions.items() if a != "therapist" and act)
        assert sorted(r.primary_speaker for r in rows if not r.is_therapist) == spoke
        for row in rows:
            if row.is_therapist:
                assert row.dialogue_cleaned == therapist.utterance
            else:
                agent = f"client_{members.index(row.primary_speaker)}"
                behaviour = env.decode_client_action(actions[agent])
                assert row.utterance_type == UTTERANCE_TYPES[behaviour.utterance_type]
                assert row.dialogue_cleaned in WORDS and row.internal_emotion[0].emotion_description in WORDS
        assert set(rewards) == {"therapist", *policies}
    assert steps == 3 and all(truncs.values())
    assert len(turn_requests(server, speak=True)) == 3 * len(members)


def test_policies_drive_some_slots_and_the_backend_personas_the_rest(serve, client_for, seeds, family):
    server = serve(varied_responder)
    backend = LLMBackend("family", client_for(server))
    env = parallel_env("family", dynamics=backend, data_path=[family], horizon=4, record_transcript=True, terminate_on_settle=False)
    obs, infos = env.reset(seed=2)
    policy = LLMClientPolicy(env, 0)
    therapist = HeuristicAgent("family", env.encoding)
    others = 0
    while env.agents:
        actions = run_sync(aclient_actions({"client_0": policy}, obs))
        actions["therapist"] = therapist.act(obs["therapist"]["observation"], obs["therapist"]["action_mask"], infos["therapist"]["state"])
        obs, _, _, _, infos = env.step(actions)
        others += sum(1 for r in infos["therapist"]["rows"] if not r.is_therapist and r.primary_speaker != env.session.members[0])
    assert len(turn_requests(server, speak=True)) == 4
    assert others and len(turn_requests(server, speak=False)) == others, "the backend's personas answer for the other slots"


def test_llm_policy_on_a_calibrated_env(serve, client_for, seeds, family):
    server = serve(varied_responder)
    personas = LLMBackend("family", client_for(server))
    env = parallel_env("family", data_path=[family], horizon=2, record_transcript=True, terminate_on_settle=False)
    obs, _ = env.reset(seed=0)
    policy = LLMClientPolicy(env, 1, backend=personas)
    action = policy.act(obs["client_1"]["observation"], obs["client_1"]["action_mask"])
    _, _, _, _, infos = env.step({"therapist": 0, "client_1": action})
    rows = [r for r in infos["therapist"]["rows"] if r.primary_speaker == env.session.members[1]]
    if action:
        assert [r.utterance_type for r in rows] == [UTTERANCE_TYPES[env.decode_client_action(action).utterance_type]]
    else:
        assert rows == []
    prompt = server.chat_requests[0].body["messages"][1]["content"]
    assert env.session.rows[0].dialogue_cleaned.strip()[:30] in prompt or "earlier turns" in prompt
    with pytest.raises(TypeError, match="LLMBackend"):
        LLMClientPolicy(env, 0)
