"""The LLM client backend and the LLM therapist against the loopback server: self-reports
move the state, benchmark rows, turn order and concurrency, the annotator, failures, the
sync and async paths, and the therapist's moves, fallbacks and rankings."""

from __future__ import annotations

import asyncio
import os
import re

import numpy as np
import pytest

from rescue_env import parallel_env
from llm_episodes import varied_responder

from rescue_env.agents.llm import LLMTherapist
from rescue_env.data import THERAPIST, load_dialogues
from rescue_env.dynamics import ClientTurn, TherapistMove
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.llm import LLMClient, LLMConfig, prompts, run_sync
from rescue_env.llm.backend import LLMBackend
from rescue_env.llm.errors import LLMCallFailed
from rescue_env.rollout import EpisodeFailed, arun_episode, run_episode
from rescue_env.state import distress_of
from rescue_env.taxonomy import ActionEncoding, label_info


@pytest.fixture(scope="module")
def seeds():
    return load_dialogues()


@pytest.fixture(scope="module")
def couple(seeds):
    return next(d for d in seeds if d.scenario == "couple")


@pytest.fixture(scope="module")
def family(seeds):
    return min((d for d in seeds if d.scenario == "family"), key=lambda d: len(d.participants))


def schema_name(request) -> str:
    return request.body["response_format"]["json_schema"]["name"]


def scripted(**by_schema):
    """A responder answering each schema name with a fixed reply (a callable gets the body);
    other schemas get :func:`varied_responder`."""

    def respond(body):
        name = body["response_format"]["json_schema"]["name"]
        reply = by_schema.get(name)
        if reply is None:
            return varied_responder(body)
        return reply(body) if callable(reply) else reply

    return respond


def persona_name(prompt: str) -> str:
    """The persona a client turn's prompt (its last message) speaks as (``You are NAME, ...``)."""
    found = re.search(r"You are ([^,.]+),", prompt)
    assert found, prompt
    return found.group(1)


def client_reply(body, *, emotion="furious and hurt", intensity=8, valence=-0.7):
    """A client turn naming its speaker (from the system prompt) with a known self-report."""
    schema = body["response_format"]["json_schema"]["schema"]
    speaker = persona_name(body["messages"][-1]["content"])
    others = schema["properties"]["stances"]["items"]["properties"]["target"]["enum"]
    return {
        "utterance": f"{speaker} speaking.",
        "utterance_type": schema["properties"]["utterance_type"]["enum"][-1],
        "addressee": schema["properties"]["addressee"]["enum"][0],
        "emotion": emotion,
        "intensity": intensity,
        "stances": [{"target": o, "viewpoint": f"{o} does not see me", "attitude": "hostile", "valence": valence} for o in others],
    }


def make_env(server, client_for, scenario, seeds, *, annotator="calibrated", horizon=4, **config):
    client = client_for(server, **config)
    backend = LLMBackend(scenario, client, annotator=annotator)
    env = GroupSupportEnv(scenario, dynamics=backend, horizon=horizon, record_transcript=True, terminate_on_settle=False)
    return env, backend, client


# --- the backend --------------------------------------------------------------------------------


def test_self_reports_set_distress_and_stance_and_rows_come_out_in_the_benchmark_schema(serve, client_for, seeds, couple):
    server = serve(scripted(client_turn=client_reply))
    env, backend, _ = make_env(server, client_for, "couple", seeds)
    _, info = env.reset(seed=3, options={"dialogue": couple.sample_id})
    before = info["state"]
    obs, _, _, _, info = env.step(env.encoding.encode(0, 1))  # speak to the first partner
    rows = info["rows"]
    clients = [r for r in rows if not r.is_therapist]
    assert rows[0].is_therapist and rows[0].support_strategy[0].strategy_type == env.encoding.strategy_names[1]
    assert clients, "someone answers"
    st = info["state"]
    for row in clients:
        slot = st.members.index(row.primary_speaker)
        assert row.dialogue_cleaned == f"{row.primary_speaker} speaking."
        assert row.utterance_type == "other" and row.target == [THERAPIST]
        (emotion,) = row.internal_emotion
        assert (emotion.emotion_description, emotion.intensity) == ("furious and hurt", 8.0)
        assert st.distress[slot] == pytest.approx(distress_of("furious and hurt", 8))
        other = 1 - slot
        assert st.stance[slot, other] == pytest.approx(-0.7)
        assert [(v.source, v.target, v.attitude) for v in row.viewpoints_attitudes] == [(row.primary_speaker, st.members[other], "hostile")]
        assert row.relation_pattern is not None and row.extras["state"]["distress"][slot] == pytest.approx(st.distress[slot], abs=1e-4)
    assert obs["distress"][: st.n] == pytest.approx(st.distress)
    assert not np.array_equal(before.distress, st.distress)
    # the episode reads back as a benchmark dialogue, simulated rows after the seed rows
    dialogue = env.session.to_dialogue()
    assert [r.row_index for r in dialogue.rows] == sorted(r.row_index for r in dialogue.rows)
    # every request is a structured-output request through the openai client
    for request in server.chat_requests:
        assert request.headers["user-agent"].startswith("AsyncOpenAI/Python")
        assert request.body["response_format"]["type"] == "json_schema" and schema_name(request) == "client_turn"


def test_personas_are_seeded_from_the_dialogue(serve, client_for, seeds, couple):
    server = serve(scripted(client_turn=client_reply))
    env, _, _ = make_env(server, client_for, "couple", seeds)
    env.reset(seed=0, options={"dialogue": couple.sample_id, "start_row": 12})
    env.step(0)
    request = server.chat_requests[0]
    system, user = request.body["messages"][0]["content"], request.body["messages"][1]["content"]
    speaker = persona_name(user)
    assert speaker in couple.participants and "couple therapy" in system
    for info in label_info("couple", "utterance_type"):
        assert info.name in system
    # the transcript before the cut, and the speaker's latest annotated emotion as private state
    assert couple.rows[11].dialogue_cleaned.strip() in user
    latest = [e for r in couple.rows[:12] for e in r.internal_emotion if e.person == speaker][-1]
    assert f"How you feel: {latest.emotion_description}" in user


def test_addressed_speakers_answer_together_and_others_after_hearing_them(serve, client_for, seeds, couple):
    server = serve(scripted(client_turn=client_reply), latency_s=0.3)
    env, backend, _ = make_env(server, client_for, "couple", seeds)
    env.reset(seed=1, options={"dialogue": couple.sample_id})
    a, b = env.session.members
    # fix the calibrated transition's turn choice: both partners speak, A first
    respond = backend.arespond

    async def both_speak(session, move, planned, **kw):
        return await respond(session, move, [ClientTurn(0, "disclosure"), ClientTurn(1, "defense")], **kw)

    backend.arespond = both_speak
    # the server counts the requests it holds at once (each for latency_s): concurrency is
    # read there, not from a stopwatch that one-time costs of a busy machine would upset
    server.max_in_flight = 0
    env.step(env.encoding.encode(env.encoding.group_target, 0))  # the therapist addresses the couple
    first = server.chat_requests[-2:]
    assert server.max_in_flight == 2, "both partners answer the same move concurrently"
    assert all(f"{a} speaking." not in r.body["messages"][1]["content"] for r in first)

    server.max_in_flight = 0
    env.step(env.encoding.encode(0, 0))  # the therapist addresses A only: B answers after A
    assert server.max_in_flight == 1, "B's request waits for A's reply"
    second = server.chat_requests[-1].body["messages"]
    assert persona_name(second[-1]["content"]) == b
    assert re.search(rf"{a} \(to {THERAPIST}\) \[\w+\]: {a} speaking\.", second[1]["content"])


def test_llm_annotator_sets_the_pattern(serve, client_for, seeds, family):
    pattern = {"pattern": "cross_generational_coalition", "reason": "two against one"}
    server = serve(scripted(client_turn=client_reply, relation_pattern=lambda body: pattern))
    env, _, _ = make_env(server, client_for, "family", seeds, annotator="llm")
    env.reset(seed=0, options={"dialogue": family.sample_id})
    _, _, _, _, info = env.step(0)
    assert info["state"].pattern == "cross_generational_coalition"
    assert all(r.relation_pattern == "cross_generational_coalition" for r in info["rows"])
    request = next(r for r in server.chat_requests if schema_name(r) == "relation_pattern")
    enum = request.body["response_format"]["json_schema"]["schema"]["properties"]["pattern"]["enum"]
    assert enum[-1] == "none" and set(enum[:-1]) == {li.name for li in label_info("family", "pattern")}
    for info_ in label_info("family", "pattern"):
        assert prompts.first_sentence(info_.definition) in request.body["messages"][0]["content"]
    pattern["pattern"] = "none"
    _, _, _, _, info = env.step(0)
    assert info["state"].pattern is None


def test_unknown_annotator_is_refused(client_for, serve):
    with pytest.raises(ValueError, match="annotator"):
        LLMBackend("couple", client_for(serve()), annotator="oracle")


def test_a_call_that_fails_for_good_raises_and_run_episode_records_the_episode_as_failed(serve, client_for, seeds, couple):
    server = serve(scripted(client_turn="this is not JSON"))
    env, _, client = make_env(server, client_for, "couple", seeds)
    env.reset(seed=0, options={"dialogue": couple.sample_id})
    with pytest.raises(LLMCallFailed, match="client .*not a JSON object|client .*schema") as caught:
        env.step(0)
    assert isinstance(caught.value, EpisodeFailed)
    agent = LLMTherapist("couple", env.encoding, client=client)
    record = run_episode(env, agent, couple.sample_id, 0, 0)
    assert record.failed and record.error.startswith("client ")
    line = record.to_json()
    assert line["failed"] is True and line["error"] == record.error and line["sigma_return"] is None
    assert client.usage().failures >= 2 and client.usage().reasked >= 2


def test_async_episode_equals_the_synchronous_one(serve, client_for, seeds, family):
    server = serve(varied_responder)
    records = []
    for runner in ("sync", "async"):
        env, _, client = make_env(server, client_for, "family", seeds, annotator="llm", seed=0)
        agent = LLMTherapist("family", env.encoding, client=client)
        if runner == "sync":
            records.append(run_episode(env, agent, family.sample_id, 0, 5))
        else:
            records.append(run_sync(arun_episode(env, agent, family.sample_id, 0, 5)))
    sync, async_ = (r.to_json() for r in records)
    assert not records[0].failed and sync == async_


def test_concurrent_episodes_share_one_backend_and_client(serve, client_for, seeds, couple, family):
    server = serve(varied_responder, latency_s=0.05)
    client = client_for(server, max_concurrency=8)
    backends = {s: LLMBackend(s, client) for s in ("couple", "family")}

    async def play():
        tasks = []
        for d in (couple, family):
            for e in range(3):
                env = GroupSupportEnv(d.scenario, dynamics=backends[d.scenario], horizon=3, record_transcript=True, terminate_on_settle=False)
                tasks.append(arun_episode(env, LLMTherapist(d.scenario, env.encoding, client=client), d.sample_id, e, 0, tag=f"{d.sample_id}/{e}"))
        return await asyncio.gather(*tasks)

    records = run_sync(play())
    assert all(not r.failed for r in records)
    calls = len(server.chat_requests)
    assert server.max_in_flight > 1, "the episodes' calls overlap at the server"
    per_episode = [client.usage(f"{d.sample_id}/{e}").calls for d in (couple, family) for e in range(3)]
    assert all(per_episode) and sum(per_episode) == client.usage().calls == calls


# --- the LLM therapist ------------------------------------------------------------------------


def move_reply(target, strategy="track", intervene=True, utterance="Let us slow down and hear each other."):
    return {"intervene": intervene, "target": target, "strategy": strategy, "utterance": utterance, "reason": "test"}


def test_therapist_move_and_utterance_reach_the_therapist_row(serve, client_for, seeds, couple):
    server = serve(scripted(therapist_move=lambda body: move_reply("Couple", "reframe")))
    env, _, client = make_env(server, client_for, "couple", seeds, horizon=2)
    agent = LLMTherapist("couple", env.encoding, client=client)
    record = run_episode(env, agent, couple.sample_id, 0, 0)
    therapist_rows = [r for r in record.dialogue.rows if r.extras.get("simulated") and r.is_therapist]
    assert len(therapist_rows) == 2
    for row in therapist_rows:
        assert row.dialogue_cleaned == "Let us slow down and hear each other."
        assert row.target == ["Couple"] and row.strategy == "reframe"
    request = next(r for r in server.chat_requests if schema_name(r) == "therapist_move")
    schema = request.body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["target"]["enum"] == [*couple.participants, "Couple"]
    assert schema["properties"]["strategy"]["enum"] == list(env.encoding.strategy_names)
    assert "Group state" in request.body["messages"][1]["content"] and record.stats["therapist_fallbacks"] == 0


def test_therapist_sees_dyads_of_a_family_and_can_hide_the_state(serve, client_for, family):
    server = serve(scripted(therapist_move=lambda body: move_reply(" & ".join(family.participants[:2]))))
    encoding = ActionEncoding("family")
    agent = LLMTherapist("family", encoding, client=client_for(server), show_state=False)
    env = GroupSupportEnv("family", data_path=[family], horizon=2, record_transcript=True)
    _, info = env.reset(seed=0)
    agent.reset(seed=0)
    agent.attach(env.session)
    action = agent.act(None, info["action_mask"], info["state"])
    decision = encoding.decode(action)
    assert encoding.target_slots(decision.target, 3) == (0, 1) and encoding.strategy_names[decision.strategy] == "track"
    assert "Group state" not in server.chat_requests[-1].body["messages"][1]["content"]
    assert env.session.rows[-1].dialogue_cleaned.strip() in server.chat_requests[-1].body["messages"][1]["content"]


def test_invalid_labels_fall_back_to_listening_and_are_counted(serve, client_for, seeds, couple):
    server = serve(scripted(therapist_move=lambda body: move_reply("Nobody")))
    env, _, client = make_env(server, client_for, "couple", seeds, horizon=3)
    agent = LLMTherapist("couple", env.encoding, client=client)
    record = run_episode(env, agent, couple.sample_id, 0, 0)
    assert not record.failed and record.stats["therapist_fallbacks"] == 3 and agent.fallbacks == 3
    assert agent.fallback_reasons == {"unusable reply": 3}
    assert not any(r.is_therapist for r in record.dialogue.rows if r.extras.get("simulated"))
    assert client.usage().reasked >= 3


def test_therapist_without_a_reply_fails_the_episode(serve, client_for, seeds, couple):
    server = serve()
    env, _, _ = make_env(server, client_for, "couple", seeds)
    dead = LLMClient(LLMConfig(base_url=server.base_url, model="mock", max_retries=1, backoff_initial_s=0.01, timeout_s=0.5))
    server.stop()  # nothing listens on its port any more
    agent = LLMTherapist("couple", env.encoding, client=dead)
    record = run_episode(env, agent, couple.sample_id, 0, 0)
    assert record.failed and record.error.startswith("therapist: connection refused by "), record.error
    assert len(record.trace) == 1 and record.dialogue is not None  # the transcript up to the failure


def test_rank_from_top3_lists(serve, client_for, family):
    reply = {"p_speak": 0.8, "targets": ["Family", family.participants[2], "Family"], "strategies": ["boundary", "join", "repair"], "reason": "x"}
    server = serve(scripted(therapist_rank=lambda body: reply))
    encoding = ActionEncoding("family", 3)
    agent = LLMTherapist("family", encoding, client=client_for(server))
    from rescue_env.state import extract_state

    state = extract_state(family, 10)
    ranking = agent.rank(state, encoding)
    assert ranking.p_speak == pytest.approx(0.8)
    assert ranking.top_targets(encoding, family.participants, 2) == [["Family"], [family.participants[2]]]
    assert ranking.top_strategies(encoding) == ["boundary", "join", "repair"]
    assert ranking.target_probs.sum() == pytest.approx(1) and ranking.strategy_probs.sum() == pytest.approx(1)
    assert ranking.target_probs[encoding.target_mask(3) == 0].sum() == 0

    async def inside_a_loop():  # the static tasks call rank() from their event loop
        return agent.rank(state, encoding)

    assert asyncio.run(inside_a_loop()).p_speak == pytest.approx(0.8)
    schema = server.chat_requests[0].body["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["targets"]["maxItems"] == 3


def test_make_agent_builds_the_llm_therapist(serve, client_for):
    from rescue_env.agents import make_agent

    agent = make_agent("llm", "couple", client=client_for(serve()), window=4, show_state=False)
    assert isinstance(agent, LLMTherapist) and agent.name == "llm" and agent.window == 4 and not agent.show_state


def test_close_releases_the_llm_client(serve, client_for):
    server = serve(lambda body: {})
    client = client_for(server)
    closed = []
    original = client.aclose

    async def aclose():
        closed.append(True)
        await original()

    client.aclose = aclose
    env = GroupSupportEnv("couple", dynamics=LLMBackend("couple", client))
    env.close()
    assert closed == [True]
    par = parallel_env(scenario="couple", dynamics=LLMBackend("couple", client))
    par.close()
    assert closed == [True, True]


def test_each_call_of_an_episode_extends_the_previous_calls_transcript_across_roles(serve, client_for, seeds, couple):
    """LLM therapist and LLM clients in one episode: the lines a client hears within a step are
    written as the session's rows then render them, so every call's prompt up to its role's tail
    is a prefix of the next call's (a server's prompt cache evaluates only the new lines and the tail)."""
    a, b = couple.participants[:2]
    server = serve(scripted(therapist_move=lambda body: move_reply(a, "reframe"), client_turn=client_reply))
    env, backend, client = make_env(server, client_for, "couple", seeds, horizon=4)
    respond = backend.arespond

    async def both_speak(session, move, planned, **kw):  # A answers the therapist, then B hears A
        return await respond(session, move, [ClientTurn(0, "disclosure"), ClientTurn(1, "defense")], **kw)

    backend.arespond = both_speak
    agent = LLMTherapist("couple", env.encoding, client=client)
    record = run_episode(env, agent, couple.sample_id, 0, 0)
    assert not record.failed
    calls = ["\n".join(m["content"] for m in r.body["messages"]) for r in server.chat_requests]
    roles = [schema_name(r) for r in server.chat_requests]
    assert roles[:3] == ["therapist_move", "client_turn", "client_turn"] and len(calls) == 12
    kept = 0
    for before, after in zip(calls, calls[1:]):
        if re.findall(r"\(… \d+ earlier turns\)", before) != re.findall(r"\(… \d+ earlier turns\)", after):
            continue  # the transcript window moved on (every half window)
        shared = before[: before.index(f"\n\n{prompts.TAIL_MARK}\n")]
        assert after.startswith(shared), (shared[-300:], after[len(os.path.commonprefix([shared, after])) - 100 :][:300])
        kept += 1
    assert kept >= len(calls) - 3
