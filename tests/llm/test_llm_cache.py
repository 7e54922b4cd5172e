"""On-disk response cache: hits, offline replay, key sensitivity, and no secrets on disk."""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from llm_data import MESSAGES, TURN_SCHEMA

from rescue_env.llm import LLMClient, LLMConfig, ResponseCache, run_sync
from rescue_env.llm.mock_server import Faults


def ask(client: LLMClient, messages=MESSAGES, schema=TURN_SCHEMA, **kwargs):
    return run_sync(client.complete_json(messages, schema, name="client_turn", **kwargs))


def test_second_identical_call_is_a_cache_hit(serve, client_for, tmp_path):
    server = serve(lambda request: {"utterance": "Fine.", "emotion": "hope", "intensity": 3})
    client = client_for(server, cache_dir=str(tmp_path))
    first, second = ask(client), ask(client)
    assert len(server.chat_requests) == 1
    assert not first.cached and second.cached
    assert (second.data, second.raw_text, second.usage) == (first.data, first.raw_text, first.usage)
    usage = client.usage()
    assert (usage.calls, usage.cache_hits) == (2, 1)
    assert usage.prompt_tokens == first.usage.prompt_tokens  # the hit is not billed


def test_replay_with_server_stopped_is_byte_identical(serve, client_for, tmp_path):
    # Odd spacing and a re-ask: replay must reproduce the text and the whole flow, not re-serialise.
    reply = '{"utterance":  "Je suis fatiguée…", "emotion": "sadness",  "intensity": 7}'
    server = serve(lambda request: reply, faults=Faults(schedule=["schema_violation"]))
    recorded = ask(client_for(server, cache_dir=str(tmp_path)), seed=1)
    assert recorded.ok and recorded.reasked
    base_url = server.base_url
    server.stop()

    config = LLMConfig(base_url=base_url, model="mock", cache_dir=str(tmp_path), cache_mode="read", max_retries=0)
    replay = LLMClient(config)
    replayed = ask(replay, seed=1)
    assert replayed.cached and replayed.ok and replayed.reasked
    assert replayed.raw_text == recorded.raw_text
    assert replayed.raw_text.encode("utf-8") == reply.encode("utf-8")
    assert replayed.data == recorded.data
    assert not ask(replay, seed=2).ok  # a miss goes to the (stopped) server


def test_cache_key_covers_model_seed_schema_messages_temperature(serve, client_for, tmp_path):
    server = serve()
    base = dict(cache_dir=str(tmp_path), seed=0)
    ask(client_for(server, **base))
    ask(client_for(server, **base))
    assert len(server.chat_requests) == 1
    short_utterance = {"utterance": {"type": "string", "maxLength": 50}}
    other_schema = {**TURN_SCHEMA, "properties": {**TURN_SCHEMA["properties"], **short_utterance}}
    variants = [
        (client_for(server, **{**base, "model": "other"}), {}),
        (client_for(server, **base), {"seed": 1}),
        (client_for(server, **base), {"schema": other_schema}),
        (client_for(server, **base), {"messages": [*MESSAGES, {"role": "user", "content": "And now?"}]}),
        (client_for(server, **{**base, "temperature": 0.7}), {}),
    ]
    for n, (client, kwargs) in enumerate(variants, start=2):
        assert not ask(client, **kwargs).cached
        assert len(server.chat_requests) == n


def test_read_mode_never_writes(serve, client_for, tmp_path):
    server = serve()
    ask(client_for(server, cache_dir=str(tmp_path), cache_mode="read"))
    ask(client_for(server, cache_dir=str(tmp_path), cache_mode="read"))
    assert len(server.chat_requests) == 2
    assert len(ResponseCache(tmp_path)) == 0


def test_key_reaches_server_but_never_disk_logs_or_config(serve, client_for, tmp_path, monkeypatch, caplog):
    sentinel = "sk-SENTINEL-4f1c9d2e-never-write-me"
    monkeypatch.setenv("RESCUE_TEST_KEY", sentinel)
    caplog.set_level(logging.DEBUG)  # every logger, the SDK's and httpx's included
    # an earlier Hydra app in the same process may have disabled existing loggers
    for name in ("rescue_env.llm", "openai", "httpx", "httpx2"):
        monkeypatch.setattr(logging.getLogger(name), "disabled", False)
    schedule = ["rate_limit", "server_error", None, "schema_violation", None, "empty_choices"]
    server = serve(faults=Faults(schedule=schedule, retry_after="0"))
    client = client_for(server, api_key_env="RESCUE_TEST_KEY", cache_dir=str(tmp_path / "cache"))
    results = [ask(client, tag="ep"), ask(client, tag="ep"), ask(client, seed=5)]
    assert all(r.ok for r in results)

    assert {r.headers["authorization"] for r in server.chat_requests} == {f"Bearer {sentinel}"}
    files = [p for p in Path(tmp_path).rglob("*") if p.is_file()]
    assert files and not any(sentinel.encode() in p.read_bytes() for p in files)
    assert caplog.records and sentinel not in caplog.text
    assert sentinel not in repr(client) and sentinel not in str(asdict(client.config))
    assert sentinel not in str(client.usage().to_dict()) and sentinel not in str(results)


def test_refused_key_is_not_quoted_in_errors_or_logs(serve, client_for, monkeypatch, caplog):
    sentinel = "sk-SENTINEL-wrong-key-5b7e"
    monkeypatch.setenv("RESCUE_TEST_KEY", sentinel)
    caplog.set_level(logging.DEBUG)
    server = serve(require_key="sk-the-right-one")
    result = ask(client_for(server, api_key_env="RESCUE_TEST_KEY"))
    assert not result.ok and result.retries == 0 and "RESCUE_TEST_KEY" in result.error
    assert sentinel not in result.error and sentinel not in caplog.text


def test_unset_key_variable_sends_dummy_key(serve, client_for, monkeypatch):
    monkeypatch.delenv("RESCUE_TEST_KEY", raising=False)
    server = serve()
    ask(client_for(server, api_key_env="RESCUE_TEST_KEY"))
    assert server.chat_requests[0].headers["authorization"] == "Bearer EMPTY"
