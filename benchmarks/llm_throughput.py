"""Throughput of the LLM client layer against the loopback mock server.

Every request takes a fixed latency L on the server and the client keeps at most C in
flight, so the best possible rate is C / L requests per second. The client must get
close to it (target: 80 %), also when 5 % of requests fail with a 500 or a 429
(``Retry-After: 0``) and are retried.

The server runs in its own process, as a real one would, so that it does not compete
with the client for the interpreter lock; C warm-up requests open the connections first.

    python benchmarks/llm_throughput.py [--concurrency 64] [--latency 0.2] [--requests 512]
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


async def timed_run(client: LLMClient, n: int, warmup: int) -> tuple[float, UsageStats]:
    """Seconds to finish ``n`` concurrent ``complete_json`` calls, and their usage."""

    def calls(count: int, tag: str) -> list:
        return [
            client.complete_json([{"role": "user", "content": f"{tag} {i}"}], SCHEMA, name="turn", tag=tag)
            for i in range(count)
        ]

    async with client:
        await asyncio.gather(*calls(warmup, "warmup"))
        start = time.perf_counter()
        await asyncio.gather(*calls(n, "timed"))
        return time.perf_counter() - start, client.usage("timed")


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
    parser.add_argument("--requests", type=int, default=512, help="timed calls per scenario")
    parser.add_argument(
        "--fault-rate", type=float, default=0.05, help="share of 500s + 429s in the faulty scenario"
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
            client = LLMClient(LLMConfig(base_url=base_url, model="mock", max_concurrency=args.concurrency))
            elapsed, usage = asyncio.run(timed_run(client, args.requests, warmup=args.concurrency))
        finally:
            process.terminate()
            process.wait()
        rate = args.requests / elapsed
        print(
            f"{label:>10}: {rate:6.1f} req/s = {rate / ideal:6.1%} of ideal"
            f"  ({elapsed:.2f}s; retries {usage.retries}, failures {usage.failures},"
            f" call latency p50 {usage.percentile_s(50):.2f}s p99 {usage.percentile_s(99):.2f}s)"
        )


if __name__ == "__main__":
    main()
