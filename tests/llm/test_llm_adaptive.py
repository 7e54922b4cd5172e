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
    server = serve(flavour="llama_cpp", latency_s=0.03)
    client = client_for(server, max_concurrency=16)
    results = calls(client, 100)
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
    server = serve(faults=Faults(schedule=["stall"] * 8, stall_s=0.5))
    client = client_for(server, max_concurrency=8, timeout_s=0.2)
    results = calls(client, 8)
    assert all(r.ok for r in results)
    report = client.concurrency.report()
    assert report["overloads"] == 8 and report["decreases"] == 1 and report["lowest_limit"] == 4


def test_fixed_concurrency_when_adaptation_is_off(serve, client_for):
    server = serve(flavour="llama_cpp", latency_s=0.01)
    client = client_for(server, max_concurrency=4, adaptive_concurrency=False)
    assert all(r.ok for r in calls(client, 12))
    assert client.concurrency is None


def test_only_overload_errors_decrease():
    controller = AdaptiveConcurrency(8)
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    bad = openai.BadRequestError("no", response=httpx.Response(400, request=request), body=None)
    controller.on_error(bad, sent_at=1.0)
    assert controller.report()["limit"] == 8
    busy = openai.RateLimitError("busy", response=httpx.Response(429, request=request), body=None)
    controller.on_error(busy, sent_at=2.0)
    assert controller.report()["limit"] == 4 and controller.report()["overloads"] == 1
