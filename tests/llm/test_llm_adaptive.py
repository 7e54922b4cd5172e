"""Requests in flight sized to the server: a one-slot server gets about one request at a time,
a batching one keeps the ceiling, and timeouts do not turn into a retry storm."""

from __future__ import annotations

import asyncio

import openai
import httpx2 as httpx

from rescue_env.llm import run_sync
from rescue_env.llm.adaptive import AdaptiveConcurrency
from rescue_env.llm.mock_server import Faults


def calls(client, n):
    async def many():
        async with client:
            return await asyncio.gather(*(client.complete_text([{"role": "user", "content": str(i)}]) for i in range(n)))

    return run_sync(many())


def test_one_slot_server_brings_the_limit_down(serve, client_for):
    # 0.1 s a reply: a loaded machine's overhead per request (tens of ms) stays small against
    # the queueing being detected, so the fastest reply is not inflated into hiding it
    server = serve(flavour="llama_cpp", latency_s=0.1)
    client = client_for(server, max_concurrency=16)
    results = calls(client, 48)
    assert all(r.ok for r in results)
    report = client.concurrency.report()
    # 16 -> 8 -> 4 at least; a one-slot server then holds a short queue, not sixteen
    assert report["max_concurrency"] == 16 and report["lowest_limit"] <= 4 and report["decreases"] >= 2


def test_a_server_that_batches_keeps_the_ceiling(serve, client_for):
    server = serve(latency_s=0.05)
    client = client_for(server, max_concurrency=8)
    assert all(r.ok for r in calls(client, 48))
    assert client.concurrency.report()["decreases"] == 0 and server.max_in_flight == 8


def test_timeouts_halve_the_limit_once_per_round_trip(serve, client_for):
    # the first 8 requests stall past the timeout together: one decrease, not eight
    server = serve(faults=Faults(schedule=["stall"] * 8, stall_s=2.0))
    client = client_for(server, max_concurrency=8, timeout_s=0.5)
    results = calls(client, 8)
    assert all(r.ok for r in results)
    report = client.concurrency.report()
    assert report["overloads"] >= 8 and report["decreases"] == 1 and report["lowest_limit"] == 4


def test_fixed_concurrency_when_adaptation_is_off(serve, client_for):
    server = serve(flavour="llama_cpp", latency_s=0.01)
    client = client_for(server, max_concurrency=4, adaptive_concurrency=False)
    assert all(r.ok for r in calls(client, 12))
    assert client.concurrency is None


def _error(cls, status):
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    return cls("x", response=httpx.Response(status, request=request), body=None)


def test_overload_errors_past_their_share_of_a_window_decrease():
    controller = AdaptiveConcurrency(8, min_window=16)
    for i in range(16):  # 400s say nothing about load
        controller.on_error(_error(openai.BadRequestError, 400), sent_at=1.0 + i)
    assert controller.report()["limit"] == 8
    for i in range(11):
        controller.on_reply("turn", sent_at=20.0 + i, latency_s=1.0)
    for i in range(5):  # 5 of a window of 16 answers were 429s: overload
        controller.on_error(_error(openai.RateLimitError, 429), sent_at=40.0 + i)
    assert controller.report() == {"max_concurrency": 8, "limit": 4, "lowest_limit": 4, "decreases": 1, "overloads": 5}


def test_scattered_rate_limits_do_not_pin_the_limit_down(serve, client_for):
    # 1 request in 25 answered 429 (Retry-After 0): retried, and the limit stays at the ceiling
    server = serve(faults=Faults(rates={"rate_limit": 0.04}, retry_after="0", seed=1), latency_s=0.1)
    client = client_for(server, max_concurrency=8)
    assert all(r.ok for r in calls(client, 160))
    report = client.concurrency.report()
    assert report["overloads"] > 0 and report["decreases"] == 0 and report["limit"] == 8


def test_a_few_slow_replies_do_not_halve_a_round_trip_but_a_slow_majority_does():
    import time

    controller = AdaptiveConcurrency(64)
    t0 = time.perf_counter()
    for i in range(64):  # four replies of a round trip 3x slow (a retry burst, a busy machine)
        controller.on_reply("turn", sent_at=t0 + i * 1e-6, latency_s=0.6 if 30 <= i < 34 else 0.2)
    assert controller.report()["decreases"] == 0
    for i in range(64):  # most of the next round trip 3x slow: the server queues
        controller.on_reply("turn", sent_at=t0 + 1 + i * 1e-6, latency_s=0.2 if i % 4 == 0 else 0.6)
    assert controller.report()["decreases"] == 1 and controller.report()["limit"] == 32
