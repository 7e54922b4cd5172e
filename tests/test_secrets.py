"""The secret scrubber: keys go by value (the variable named by ``llm.api_key_env`` and any
``*API_KEY*``/``*TOKEN*`` variable) and by shape (bearer tokens, provider key shapes)."""

from __future__ import annotations

import logging

from rescue_env.secrets import REDACTED, ScrubFilter, looks_like_key, register_secret_env, scrub


def test_a_registered_variable_is_scrubbed_by_value_whatever_its_shape(monkeypatch):
    monkeypatch.setenv("MY_LLM_CRED", "plainvalue-without-any-shape-42")
    register_secret_env("MY_LLM_CRED")
    text = "upstream said: bad credential plainvalue-without-any-shape-42 (400)"
    assert scrub(text) == f"upstream said: bad credential {REDACTED} (400)"


def test_key_named_variables_are_scrubbed_without_registration(monkeypatch):
    monkeypatch.setenv("SOME_SERVICE_API_KEY", "zzzz-unshaped-value-99")
    assert "zzzz-unshaped-value-99" not in scrub("echo: zzzz-unshaped-value-99")


def test_key_shapes_and_bearer_tokens_are_scrubbed():
    for secret in ["sk-proj-abcdefghijklmnop1234", "hf_abcdefghijklmnopqrstuvwx", "AKIAABCDEFGHIJKLMNOP", "gsk_abcdefghijklmnopqrstu"]:
        out = scrub(f"the key {secret} was rejected")
        assert secret not in out and REDACTED in out, secret
    out = scrub('{"error": "bad header Authorization: Bearer abc.def-ghi_jkl"}')
    assert "abc.def-ghi_jkl" not in out and "Bearer [redacted]" in out
    assert "hunter2hunter2" not in scrub("api_key=hunter2hunter2 rejected")


def test_ordinary_text_is_left_alone():
    text = "HTTP 500: model overloaded; retry later (skill-based, task-3)"
    assert scrub(text) == text
    assert not looks_like_key("gpt-4o-mini") and not looks_like_key("OPENAI_API_KEY")
    assert looks_like_key("sk-abcdefghijklmnop") and looks_like_key("Bearer abcdefgh")


def test_the_log_filter_scrubs_messages_and_arguments(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "SENTINEL-for-the-log-filter")
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "failed: %s", ("key SENTINEL-for-the-log-filter",), None)
    assert ScrubFilter().filter(record)
    assert "SENTINEL" not in record.getMessage()
