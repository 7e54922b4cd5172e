"""Structured-output negotiation (``llm.structured_outputs=auto``) against servers that differ:
an OpenAI-like one, one that behaves as ``llama-cpp-python``'s server, a JSON-mode-only one."""

from __future__ import annotations

import asyncio
import json

import pytest
from llm_data import MESSAGES, TURN_SCHEMA

from rescue_env.llm import LLMClient, LLMConfig, run_sync
from rescue_env.llm.capabilities import GRAMMAR_MAX_STRING_CHARS, GRAMMAR_STRING_CHARS, grammar_schema, normalise_setting


def ask(client: LLMClient, schema=TURN_SCHEMA):
    return run_sync(client.complete_json(MESSAGES, schema, name="client_turn"))


def formats(server) -> list[str]:
    """Each chat request's response_format, as 'type' or 'type+schema'."""
    out = []
    for request in server.chat_requests:
        fmt = request.body.get("response_format") or {}
        out.append(fmt.get("type", "text") + ("+schema" if "schema" in fmt else ""))
    return out


def test_a_server_with_json_schema_pays_nothing(serve, client_for):
    server = serve()
    client = client_for(server)
    assert ask(client).ok and ask(client).ok
    assert formats(server) == ["json_schema", "json_schema"]
    assert client.formats.report() == {"setting": "auto", "mode": "json_schema", "trials": [{"mode": "json_schema", "outcome": "accepted"}]}


def test_llama_cpp_server_gets_json_object_with_schema_after_a_probe(serve, client_for):
    server = serve(flavour="llama_cpp")
    client = client_for(server)
    result = ask(client)
    assert result.ok and result.retries == 0, "a refused format is not retried"
    assert formats(server) == ["json_schema", "json_object+schema", "json_object+schema"]
    probe, call = server.chat_requests[1:]
    assert probe.body["max_tokens"] == 16
    # the real call: the schema goes to the grammar, not into the prompt; free strings get a bound
    assert call.body["messages"] == MESSAGES
    sent = call.body["response_format"]["schema"]
    assert sent["properties"]["utterance"]["maxLength"] == GRAMMAR_STRING_CHARS["utterance"]
    assert "maxLength" not in sent["properties"]["emotion"], "an enum needs no bound"
    assert "maxLength" not in TURN_SCHEMA["properties"]["utterance"], "the caller's schema is not changed"
    # the reply budget is sized to the role's schema, not the config's cap
    assert call.body["max_tokens"] < client.config.max_tokens
    assert client.formats.mode == "json_object_schema"
    outcomes = [t["outcome"] for t in client.formats.report()["trials"]]
    assert outcomes[0].startswith("rejected:") and "Input should be 'text' or 'json_object'" in outcomes[0]
    assert outcomes[1] == "accepted"
    assert ask(client).ok and formats(server)[3:] == ["json_object+schema"], "the mode is found once"


def test_json_mode_server_that_ignores_the_schema_gets_it_in_the_prompt(serve, client_for):
    reply = {"utterance": "I'm tired.", "emotion": "sadness", "intensity": 6}
    server = serve(lambda request: reply, flavour="llama_cpp", ignore_schema=True)
    client = client_for(server)
    result = ask(client)
    assert result.ok and result.data == reply
    assert formats(server) == ["json_schema", "json_object+schema", "json_object"]
    assert json.dumps(TURN_SCHEMA) in server.chat_requests[-1].body["messages"][-1]["content"], "after the shared part"
    assert client.formats.mode == "json_object"
    assert "not enforced" in client.formats.trials[1]["outcome"]


def test_a_fixed_mode_the_server_refuses_fails_at_once_with_advice(serve, client_for):
    server = serve(flavour="llama_cpp")
    result = ask(client_for(server, structured_outputs="json_schema"))
    assert not result.ok and result.retries == 0 and len(server.chat_requests) == 1
    assert "json_schema" in result.error and "structured_outputs" in result.error


def test_concurrent_first_calls_negotiate_once(serve, client_for):
    server = serve(flavour="llama_cpp", latency_s=0.02)
    client = client_for(server)

    async def many():
        return await asyncio.gather(*(client.complete_json(MESSAGES, TURN_SCHEMA, name="t") for _ in range(6)))

    results = run_sync(many())
    assert all(r.ok for r in results)
    kinds = formats(server)
    # every first call tried json_schema at once; one probe; then each call once in the found mode
    assert kinds.count("json_schema") == 6 and kinds.count("json_object+schema") == 1 + 6
    assert server.max_in_flight == 1, "the llama_cpp mock serves one request at a time"


def test_bounds_a_grammar_lets_pass_are_clamped(serve, client_for):
    schema = {
        **TURN_SCHEMA,
        "properties": {**TURN_SCHEMA["properties"], "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}},
        "required": [*TURN_SCHEMA["required"], "tags"],
    }

    def respond(request):  # what llama-cpp-python's grammar let through: 123 for a 1-10 integer
        return {"utterance": "no", "emotion": "anger", "intensity": 123, "tags": ["a", "b", "c"]}

    server = serve(respond)
    result = ask(client_for(server), schema)
    assert result.ok and result.repaired and not result.reasked
    assert result.data["intensity"] == 10 and isinstance(result.data["intensity"], int)
    assert result.data["tags"] == ["a", "b"]


def test_replay_from_cache_keeps_the_negotiated_mode(serve, client_for, tmp_path):
    server = serve(flavour="llama_cpp")
    first = ask(client_for(server, cache_dir=str(tmp_path)))
    url = server.base_url
    server.stop()
    replay = LLMClient(LLMConfig(base_url=url, model="mock", cache_dir=str(tmp_path), max_retries=0, timeout_s=1))
    again = ask(replay)
    assert again.ok and again.cached and again.data == first.data
    assert replay.formats.mode == "json_object_schema"


@pytest.mark.parametrize(
    ("value", "setting"),
    [(True, "json_schema"), ("False", "json_object"), ("auto", "auto"), ("json_object_schema", "json_object_schema")],
)
def test_setting_values(value, setting):
    assert normalise_setting(value) == setting
    assert LLMConfig(structured_outputs=value).structured_outputs == setting


def test_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="structured_outputs must be one of"):
        LLMConfig(structured_outputs="grammar")



def test_grammar_schema_keeps_enums_the_converter_would_drop():
    schema = {
        "type": "object",
        "properties": {"level": {"type": ["integer", "null"], "enum": [0, 1, 2, None]}, "why": {"type": "string"}},
        "required": ["level", "why"],
    }
    shaped = grammar_schema(schema)
    assert shaped["properties"]["level"] == {"enum": [0, 1, 2, None]}
    assert shaped["properties"]["why"]["maxLength"] == GRAMMAR_MAX_STRING_CHARS
    assert schema["properties"]["level"]["type"] == ["integer", "null"], "the caller's schema is not changed"
    # integer bounds the converter ignores become an enum it enforces
    assert grammar_schema(TURN_SCHEMA)["properties"]["intensity"] == {"enum": list(range(1, 11))}


def test_grammar_schema_holds_bounded_numbers_to_a_grid():
    """llama-cpp-python's converter ignores a number's bounds (SmolLM2 wrote valence 10 for
    -1..1): the grammar gets the values of a grid between them instead."""
    schema = {"type": "object", "properties": {"valence": {"type": "number", "minimum": -1, "maximum": 1}}, "required": ["valence"]}
    grid = grammar_schema(schema)["properties"]["valence"]["enum"]
    assert grid[0] == -1 and grid[-1] == 1 and 0 in grid and len(grid) == 21
    assert all(-1 <= v <= 1 for v in grid)
