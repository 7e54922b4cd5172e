"""LLMClient against the loopback server: requests, faults, concurrency, usage."""

from __future__ import annotations

import asyncio
import json
import time

import httpx2
import jsonschema
import openai
import pytest
from llm_data import MESSAGES, TURN_SCHEMA

from rescue_env.llm import LLMClient, LLMConfig, run_sync
from rescue_env.llm.client import Usage, _completion_fields, _retry_after_s
from rescue_env.llm.mock_server import Faults


def ask(client: LLMClient, **kwargs):
    return run_sync(client.complete_json(MESSAGES, TURN_SCHEMA, name="client_turn", **kwargs))


def test_request_goes_through_openai_with_json_schema(serve, client_for):
    server = serve()
    client = client_for(server, seed=7, temperature=0.3, max_tokens=64, extra_body={"enable_thinking": False})
    result = ask(client)
    assert result.ok and result.data == {"utterance": "ok", "emotion": "anger", "intensity": 1}
    (request,) = server.chat_requests
    assert request.headers["user-agent"].startswith("AsyncOpenAI/Python")
    body = request.body
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "client_turn", "schema": TURN_SCHEMA, "strict": True},
    }
    assert body["messages"] == MESSAGES
    assert (body["model"], body["seed"], body["temperature"], body["max_tokens"]) == ("mock", 7, 0.3, 64)
    assert body["enable_thinking"] is False
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0


def test_json_object_fallback_puts_schema_in_prompt(serve, client_for):
    server = serve(lambda request: {"utterance": "I'm tired.", "emotion": "sadness", "intensity": 6})
    result = ask(client_for(server, structured_outputs=False))
    assert result.ok and result.data["intensity"] == 6
    body = server.chat_requests[0].body
    assert body["response_format"] == {"type": "json_object"}
    assert json.dumps(TURN_SCHEMA) in body["messages"][-1]["content"], "after what every role shares"
    assert json.dumps(TURN_SCHEMA) not in body["messages"][0]["content"] and len(body["messages"]) == len(MESSAGES)


def test_complete_text(serve, client_for):
    server = serve(faults=Faults(schedule=[None, "empty_choices"]))
    client = client_for(server)
    first = run_sync(client.complete_text(MESSAGES))
    assert first.ok and first.raw_text == "ok" and first.data is None
    assert "response_format" not in server.chat_requests[0].body
    second = run_sync(client.complete_text(MESSAGES))  # no choice: the server's fault, retried
    assert second.ok and second.raw_text == "ok" and second.retries == 1


def test_retry_after_is_honoured(serve, client_for):
    server = serve(faults=Faults(schedule=["rate_limit"], retry_after="1"))
    result = ask(client_for(server))
    assert result.ok and result.retries == 1
    assert 0.95 <= result.latency_s < 1.8
    assert len(server.chat_requests) == 2


def test_retry_after_forms():
    def error(**headers: str) -> openai.RateLimitError:
        request = httpx2.Request("POST", "http://127.0.0.1/v1")
        response = httpx2.Response(429, headers=headers, request=request)
        return openai.RateLimitError("slow down", response=response, body=None)

    assert _retry_after_s(error(**{"Retry-After": "2.5"})) == 2.5
    assert _retry_after_s(error(**{"retry-after-ms": "300", "Retry-After": "9"})) == 0.3
    in_3s = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 3))
    assert 1.5 < _retry_after_s(error(**{"Retry-After": in_3s})) <= 3.5
    assert _retry_after_s(error(**{"Retry-After": "3600"})) == 120.0
    assert _retry_after_s(error()) is None


def test_server_errors_are_retried(serve, client_for):
    server = serve(faults=Faults(schedule=["server_error", "server_error"]))
    client = client_for(server)
    result = ask(client)
    assert result.ok and result.retries == 2
    assert client.usage().retries == 2 and client.usage().failures == 0


def test_exhausted_retries_count_as_failure(serve, client_for):
    server = serve(faults=Faults(schedule=["server_error"] * 3))
    client = client_for(server, max_retries=2)
    result = ask(client)
    assert not result.ok and result.data is None and result.error.startswith("HTTP 500: ")
    assert result.retries == 2 and len(server.chat_requests) == 3
    assert client.usage().failures == 1


def test_stall_beyond_timeout_is_retried(serve, client_for):
    server = serve(faults=Faults(schedule=["stall"], stall_s=3.0))
    result = ask(client_for(server, timeout_s=0.3))
    assert result.ok and result.retries == 1
    assert result.latency_s < 1.5


def test_unreachable_server_fails_without_raising(serve, client_for):
    server = serve()
    client = client_for(server, max_retries=2)
    server.stop()
    result = ask(client)
    assert not result.ok and result.retries == 2
    # named for what it is, though the aiohttp transport reports it as a connect timeout
    assert result.error.startswith("connection refused by 127.0.0.1:"), result.error


def test_other_4xx_are_not_retried(serve):
    server = serve()
    client = LLMClient(LLMConfig(base_url=server.base_url.replace("/v1", "/v9"), backoff_initial_s=0.01))
    result = ask(client)
    assert not result.ok and result.error.startswith("HTTP 404: ") and result.retries == 0
    assert "llm.base_url" in result.error  # the likely cause
    assert len(server.requests) == 1


def test_truncated_json_is_repaired(serve, client_for):
    schema = {"type": "object", "properties": {"utterance": {"type": "string"}}, "required": ["utterance"]}
    server = serve(lambda request: {"utterance": "I feel unheard whenever we talk about money."},
                   faults=Faults(schedule=["truncated"]))
    client = client_for(server)
    result = run_sync(client.complete_json(MESSAGES, schema, name="turn"))
    assert result.ok and result.repaired and not result.reasked
    assert result.data["utterance"].startswith("I feel")
    assert result.raw_text != json.dumps(result.data)
    assert client.usage().repaired == 1


def test_a_raw_newline_inside_a_string_is_valid_as_sent(serve, client_for):
    """llama.cpp's JSON grammar lets a raw newline into a string; the value is unambiguous,
    so the reply counts as valid first time rather than repaired."""
    schema = {"type": "object", "properties": {"utterance": {"type": "string"}}, "required": ["utterance"]}
    server = serve(lambda request: '{"utterance": "I remember.\nThen he left."}')
    client = client_for(server)
    result = run_sync(client.complete_json(MESSAGES, schema, name="turn"))
    assert result.ok and not result.repaired and result.data["utterance"] == "I remember.\nThen he left."
    assert client.usage().valid_first_try == 1


def test_a_reply_cut_at_max_tokens_and_unusable_is_retried_not_reasked(serve, client_for):
    """finish_reason 'length' and missing fields: the server cut it; the same request is sent
    again (with backoff) and the re-asks stay for the model's own mistakes."""
    server = serve(faults=Faults(schedule=["truncated"]))
    client = client_for(server, reasks=0)
    result = ask(client)
    assert result.ok and result.retries == 1 and not result.reasked and not result.repaired
    first, second = server.chat_requests
    assert first.body == second.body
    assert client.usage().reasked == 0 and client.usage().retries == 1


def test_a_body_cut_mid_json_is_retried(serve, client_for):
    server = serve(faults=Faults(schedule=["cut_body"]))
    result = ask(client_for(server))
    assert result.ok and result.retries == 1 and not result.reasked


def test_schema_violation_is_reasked_once(serve, client_for):
    server = serve(faults=Faults(schedule=["schema_violation"]))
    client = client_for(server)
    result = ask(client)
    assert result.ok and result.reasked
    _, second = server.chat_requests
    bad_reply, correction = second.body["messages"][-2:]
    assert second.body["messages"][:-2] == MESSAGES
    assert bad_reply["role"] == "assistant"
    assert json.loads(bad_reply["content"]) == {"utterance": None, "emotion": None, "intensity": None}
    assert correction["role"] == "user" and "schema violation" in correction["content"]


@pytest.mark.parametrize("reasks", [0, 1, 2])
def test_llm_reasks_sets_how_often_a_schema_violation_is_asked_again(serve, client_for, reasks):
    server = serve(faults=Faults(schedule=["schema_violation"] * (reasks + 1)))
    client = client_for(server, reasks=reasks)
    result = ask(client, tag="episode-1")
    assert not result.ok and result.reasked == (reasks > 0) and "schema violation" in result.error
    assert result.raw_text == json.dumps({"utterance": None, "emotion": None, "intensity": None})
    assert len(server.chat_requests) == reasks + 1 and result.retries == 0
    assert client.usage().failures == 1 and client.usage("episode-1").failures == 1


def test_the_default_reasks_are_two(serve, client_for):
    server = serve(faults=Faults(schedule=["schema_violation", "schema_violation"]))
    result = ask(client_for(server))
    assert result.ok and result.reasked and len(server.chat_requests) == 3


def test_empty_choices_is_retried_like_a_5xx_and_spends_no_reask(serve, client_for):
    server = serve(faults=Faults(schedule=["empty_choices", "empty_choices", "schema_violation"]))
    client = client_for(server, reasks=1)
    result = ask(client)
    # two server faults are retried; the model's bad answer still has its re-ask
    assert result.ok and result.retries == 2 and result.reasked and len(server.chat_requests) == 4
    first, second, third, _ = server.chat_requests
    assert first.body == second.body == third.body


def test_empty_choices_past_max_retries_fail_with_their_reason(serve, client_for):
    server = serve(faults=Faults(schedule=["empty_choices"] * 3))
    result = ask(client_for(server, max_retries=2))
    assert not result.ok and result.error == "the server returned no choices (after 2 retries)" and not result.reasked


def test_mixed_faults_under_concurrency_all_complete(serve, client_for):
    kinds = ["rate_limit", "server_error", "truncated", "schema_violation", "empty_choices"]
    rates = {kind: 0.1 for kind in kinds}
    server = serve(faults=Faults(rates=rates, retry_after="0", seed=3))
    client = client_for(server, max_concurrency=8)

    async def many():
        calls = [client.complete_json(MESSAGES, TURN_SCHEMA, name="t", tag=f"ep{i % 4}") for i in range(60)]
        return await asyncio.gather(*calls)

    results = run_sync(many())
    run = client.usage()
    assert run.calls == 60 and sum(client.usage(f"ep{i}").calls for i in range(4)) == 60
    assert run.failures == sum(not r.ok for r in results)
    assert run.retries == sum(r.retries for r in results) > 0
    assert run.reasked == sum(r.reasked for r in results) > 0
    assert all(r.ok == (r.data is not None) for r in results)
    assert all(not r.ok or jsonschema.validate(r.data, TURN_SCHEMA) is None for r in results)


def test_concurrency_is_bounded_and_saturated(serve, client_for):
    latency, concurrency, n = 0.2, 8, 32
    server = serve(latency_s=latency)
    client = client_for(server, max_concurrency=concurrency)

    async def many():
        async with client:
            start = time.perf_counter()
            calls = [client.complete_text([{"role": "user", "content": str(i)}]) for i in range(n)]
            results = await asyncio.gather(*calls)
            return results, time.perf_counter() - start

    results, elapsed = run_sync(many())
    ideal = n / concurrency * latency
    assert all(r.ok for r in results)
    assert 0.95 * ideal <= elapsed < 2 * ideal


def test_usage_per_tag_merge_and_cost(serve, client_for):
    server = serve()
    client = client_for(server, price_per_1k_input=1.0, price_per_1k_output=2.0)
    for tag in ("ep1", "ep1", "ep2"):
        ask(client, tag=tag)
    run, ep1, ep2 = client.usage(), client.usage("ep1"), client.usage("ep2")
    assert (ep1.calls, ep2.calls, run.calls) == (2, 1, 3)
    assert (ep1 + ep2).to_dict() == run.to_dict()
    expected = (run.prompt_tokens * 1.0 + run.completion_tokens * 2.0) / 1000
    assert run.cost == pytest.approx(expected)
    summary = run.to_dict()
    assert summary["total_tokens"] == run.prompt_tokens + run.completion_tokens
    assert 0 < summary["latency_p50_s"] <= summary["latency_p90_s"] <= summary["latency_p99_s"]
    assert client_for(server).usage().to_dict()["cost"] is None


def test_programmer_errors_raise(serve, client_for):
    client = client_for(serve())
    with pytest.raises(ValueError, match="schema name"):
        run_sync(client.complete_json(MESSAGES, TURN_SCHEMA, name="has space"))
    with pytest.raises(ValueError, match="root"):
        run_sync(client.complete_json(MESSAGES, {"type": "array"}, name="t"))
    with pytest.raises(jsonschema.SchemaError):
        bad_schema = {"type": "object", "properties": {"a": {"type": 3}}}
        run_sync(client.complete_json(MESSAGES, bad_schema, name="t"))


def test_run_sync_reuses_client_across_loops_and_refuses_inside_a_loop(serve, client_for):
    client = client_for(serve())
    assert ask(client).ok and ask(client).ok

    async def nested():
        coro = client.complete_text(MESSAGES)
        with pytest.raises(RuntimeError, match="await"):
            run_sync(coro)

    asyncio.run(nested())


def test_reply_fields_of_whatever_body_a_server_sends():
    body = {"choices": [{"message": {"content": "hi"}}], "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    assert _completion_fields(body) == ("hi", Usage(3, 1))
    # JSON sent without an application/json content type reaches us as text
    assert _completion_fields(json.dumps(body)) == ("hi", Usage(3, 1))
    assert _completion_fields("<html>bad gateway</html>") == (None, Usage())
    assert _completion_fields({"choices": [], "usage": {"prompt_tokens": 3}}) == (None, Usage(3, 0))
    assert _completion_fields({"choices": [{"message": {"content": None}}]}) == ("", Usage())
    assert _completion_fields({"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": "n/a"}}) == ("x", Usage())
