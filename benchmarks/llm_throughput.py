"""Throughput of the LLM client layer against the loopback mock server.

Every reply takes a fixed latency L on the server and the client keeps at most C
requests in flight, so the best possible rate is C / L requests per second. The client
must get close to it (target: 80 %), also when 5 % of requests fail with a 500 or a 429
(``Retry-After: 0``, both sent at once) and are retried with the default backoff.
In a short run those retries mostly lengthen the last round: raise ``--requests`` to see
the steady rate.

The server runs in its own process, as a real one would, so that it does not compete
with the client for the interpreter lock; C warm-up requests open the connections first.

    python benchmarks/llm_throughput.py [--concurrency 64] [--latency 0.2] [--requests 2048]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

from rescue_env.llm import LLMClient, LLMConfig, UsageStats

SCHEMA = {
    "type": "object",
    "properties": {
        "utterance": {"type": "string"},
        "emotion": {"type": "string", "enum": ["anger", "sadness", "hope"]},
        "intensity": {"type": "integer", "minimum": 1, "maximum": 10},
    },
    "required": ["utterance", "emotion", "intensity"],
    "additionalProperties": False,
}


async def timed_run(client: LLMClient, n: int, warmup: int) -> tuple[float, float, float, UsageStats]:
    """Run ``n`` concurrent ``complete_json`` calls after ``warmup`` others.

    Returns the overall rate (n / wall time), the steady rate (the middle 80 % of
    completions over the time they took, leaving out the ramp-up and the final drain,
    where fewer than C requests are in flight), the client's CPU seconds per call (what
    bounds the rate on a busy machine) and the calls' usage.
    """
    done: list[float] = []

    async def call(i: int, tag: str) -> None:
        messages = [{"role": "user", "content": f"{tag} {i}"}]
        await client.complete_json(messages, SCHEMA, name="turn", tag=tag)
        done.append(time.perf_counter())

    async with client:
        await asyncio.gather(*(call(i, "warmup") for i in range(warmup)))
        done.clear()
        start, cpu_start = time.perf_counter(), time.process_time()
        await asyncio.gather(*(call(i, "timed") for i in range(n)))
        cpu_per_call = (time.process_time() - cpu_start) / n
    first, last = n // 10, n - n // 10 - 1  # the 10th and the 90th percentile completions
    steady = (last - first) / (done[last] - done[first])
    return n / (done[-1] - start), steady, cpu_per_call, client.usage("timed")


def serve(latency: float, faults: list[str]) -> tuple[subprocess.Popen[str], str]:
    """Start ``python -m rescue_env.llm.mock_server`` on a free port; return it and its base_url."""
    command = [sys.executable, "-m", "rescue_env.llm.mock_server", "--port", "0", "--latency", str(latency)]
    command += [arg for fault in faults for arg in ("--fault", fault)] + ["--retry-after", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    base_url = process.stdout.readline().split()[4]  # "serving Chat Completions at URL ..."
    return process, base_url


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, default=64, help="C: client max_concurrency")
    parser.add_argument("--latency", type=float, default=0.2, help="L: seconds the server takes per request")
    parser.add_argument(
        "--requests", type=int, default=2048,
        help="timed calls per scenario (N); at 512 one retry backoff near the end is a fifth of the run",
    )
    parser.add_argument(
        "--fault-rate", type=float, default=0.05, help="share of 500s + 429s in the faulty scenario"
    )
    parser.add_argument(
        "--fixed", action="store_true", help="llm.adaptive_concurrency=false (C requests in flight throughout)"
    )
    args = parser.parse_args()

    ideal = args.concurrency / args.latency
    print(f"C={args.concurrency}  L={args.latency}s  N={args.requests}  ideal C/L = {ideal:.0f} req/s")
    half = args.fault_rate / 2
    scenarios = {
        "no faults": [],
        f"{args.fault_rate:.0%} faults": [f"server_error={half}", f"rate_limit={half}"],
    }
    for label, faults in scenarios.items():
        process, base_url = serve(args.latency, faults)
        try:
            config = LLMConfig(
                base_url=base_url, model="mock", max_concurrency=args.concurrency, adaptive_concurrency=not args.fixed
            )
            client = LLMClient(config)
            rate, steady, cpu, usage = asyncio.run(timed_run(client, args.requests, warmup=args.concurrency))
        finally:
            process.terminate()
            process.wait()
        print(
            f"{label:>10}: {rate:6.1f} req/s = {rate / ideal:6.1%} of ideal;"
            f" steady {steady:6.1f} req/s = {steady / ideal:6.1%}"
            f"  ({usage.retries} retries, {usage.failures} failures, client CPU {cpu * 1000:.2f} ms/call)"
        )
        if client.concurrency is not None:
            print(f"{'':>10}  requests in flight: {client.concurrency.report()}")


if __name__ == "__main__":
    main()
