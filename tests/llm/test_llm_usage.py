"""Accounting of what a server evaluated: cached prompt tokens and its timings, where a reply
reports them."""

from __future__ import annotations

import pytest

from rescue_env.llm.usage import Usage, UsageStats


def record(stats: UsageStats, usage: Usage) -> None:
    stats.record(ok=True, cached=False, retries=0, repaired=False, reasked=False, billed=usage, latency_s=1.0, cost=None)


def test_cached_tokens_and_timings_are_read_where_a_server_reports_them():
    llama_cpp = {"usage": {"prompt_tokens": 1000, "completion_tokens": 50}, "timings": {"cache_n": 900, "prompt_ms": 700.0, "predicted_ms": 1000.0}}
    assert Usage.from_body(llama_cpp) == Usage(1000, 50, 900, 0.7, 1.0)
    openai = {"usage": {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 4}}}
    assert Usage.from_body(openai) == Usage(10, 2, 4, None, None)
    assert Usage.from_body({"usage": {"prompt_tokens": 10, "completion_tokens": 2}}) == Usage(10, 2)
    assert Usage.from_body({"usage": {"prompt_tokens": "n/a"}}) == Usage(), "a malformed count is not reported"


def test_the_report_gives_evaluated_prompt_tokens_and_server_speeds():
    stats = UsageStats()
    record(stats, Usage(1000, 50, 900, 0.5, 1.0))
    record(stats, Usage(1000, 30, 700, 1.5, 1.0))
    out = stats.to_dict()
    assert out["evaluated_prompt_tokens"] == 400 and out["evaluated_prompt_share"] == pytest.approx(0.2)
    assert out["prompt_eval_tokens_per_s"] == pytest.approx(200) and out["generation_tokens_per_s"] == pytest.approx(40)
    merged = (stats + UsageStats()).to_dict()
    assert merged["evaluated_prompt_tokens"] == 400, "merging keeps the figures"


def test_figures_a_server_does_not_report_stay_unknown():
    stats = UsageStats()
    record(stats, Usage(100, 10))
    out = stats.to_dict()
    assert out["evaluated_prompt_tokens"] is None and out["generation_tokens_per_s"] is None and out["cached_prompt_tokens"] is None
