"""Throughput of whole LLM rollouts (``dynamics=llm agent=llm``) against the loopback mock server.

What runs: ``rescue_env.experiments.rollout.run`` — the code behind ``rescue rollout dynamics=llm
agent=llm`` — on the bundled seed dialogues, with the LLM therapist and LLM client personas
talking to ``python -m rescue_env.llm.mock_server`` (its own process, as a real server would
be, so that it does not compete with the run for the interpreter lock). The server holds
every good reply for a fixed latency L and answers schema-valid JSON; the client keeps at
most C requests in flight (``llm.max_concurrency=C``), the run at most 2C episodes; the
response cache is off, so every call goes to the server.

Why C / L is the ideal: each request occupies one of the C slots for at least L seconds,
so no client can finish more than C / L requests per second. Episodes have no ideal of
their own: an episode's requests are partly sequential (the therapist speaks, then the
addressed clients answer together, then the others one by one, step after step), so a
single episode takes several L per step whatever C is. With enough episodes in flight
the C slots stay busy anyway, and the episode rate is the request rate divided by the
requests per episode. The target is >= 80 % of C / L at C = 64, also when 5 %
of requests fail with a 500 or a 429 (``Retry-After: 0``, half each, as in
``benchmarks/llm_throughput.py``) and are retried with the configured backoff.

"requests" are the run's logical LLM calls (``calls`` in ``metrics.json``; each took L on
the server); injected 500s and 429s are answered at once and show up as retries. The wall
time is the run's concurrent phase (``llm.wall_s``), not data loading or writing files.
The share of ideal is over the whole phase, ramp-up and final drain included: as the last
episodes finish, fewer than C requests are in flight, and each of them still needs several
sequential L. The rollout keeps that tail short by the order in which waiting requests get
a slot (:mod:`rescue_env.concurrency`: admission index + steps played × window, so episodes
behind go first and none trails the run); what is left of it is about the same whatever
the number of episodes (about a second here, more when a retry's backoff falls near the
end), so the default run is long: at least 16 C episodes, about 40 s at C = 64, L = 0.2 s
(at 4 C episodes, ``--episodes 29``, they weigh four times as much). "run() s" is the whole
``run`` call; "client CPU s" the CPU time this process (the client side: rollout,
env, agents, HTTP client) spent in it. The server runs apart; when client CPU nears the
wall time, or client and server together exceed the cores, the CPU, not L, sets the pace.

A short warm-up run (one episode per seed dialogue) against the same server first pays the
imports, the data parse and the server's first connections. Each scenario is then timed
``--rounds`` times (the machine is shared and noisy: the same run varies by a few points);
the row gives the median round, and "range" the lowest and highest share of ideal. The
server's faults are drawn from one seeded stream, so each round meets other faults.

    python benchmarks/llm_rollout_throughput.py [--concurrency 64] [--latency 0.2]
        [--episodes N_PER_SEED] [--horizon 4] [--fault-rate 0.05] [--rounds 1]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")  # as `rescue rollout` does (torch comes with the agents)

from tabulate import tabulate  # noqa: E402

from rescue_env.experiments.config import compose  # noqa: E402
from rescue_env.experiments.rollout import run  # noqa: E402
from rescue_env.data import load_dialogues  # noqa: E402

#: A variable that holds no key: the loopback server needs none, and no real key is sent.
NO_KEY_ENV = "RESCUE_BENCHMARK_NO_API_KEY"


def serve(latency: float, faults: list[str]) -> tuple[subprocess.Popen[str], str]:
    """Start ``python -m rescue_env.llm.mock_server`` on a free loopback port; return it and its base_url."""
    command = [sys.executable, "-m", "rescue_env.llm.mock_server", "--port", "0", "--latency", str(latency)]
    command += [arg for fault in faults for arg in ("--fault", fault)] + ["--retry-after", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    base_url = process.stdout.readline().split()[4]  # "serving Chat Completions at URL ..."
    assert base_url.startswith("http://127.0.0.1:"), base_url
    return process, base_url


def overrides(base_url: str, concurrency: int, episodes: int, horizon: int) -> list[str]:
    """``rescue rollout`` overrides of an LLM run on the bundled seeds against ``base_url``."""
    return [
        "dynamics=llm",
        "agent=llm",
        f"llm.base_url={base_url}",
        "llm.model=mock",
        f"llm.api_key_env={NO_KEY_ENV}",
        f"llm.max_concurrency={concurrency}",
        "llm.cache_dir=null",
        f"episodes={episodes}",
        f"env.horizon={horizon}",
        "env.terminate_on_settle=false",  # every episode plays all its steps
        "progress=false",
        "report=false",
    ]


def rollout(base_url: str, args: argparse.Namespace, episodes: int, folder: Path) -> tuple[dict[str, Any], float, float]:
    """One quiet ``run`` in ``folder``: its LLM usage report (from ``metrics.json``), its
    wall seconds and the CPU seconds this process spent in it (the server's are apart)."""
    cfg = compose("rollout", overrides(base_url, args.concurrency, episodes, args.horizon))
    started, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        run(cfg, folder)
    whole, cpu = time.perf_counter() - started, time.process_time() - cpu
    usage = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))["llm"]
    return usage, whole, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=64, help="C: llm.max_concurrency")
    parser.add_argument("--latency", type=float, default=0.2, help="L: seconds the server takes per good reply")
    parser.add_argument(
        "--episodes", type=int, default=None,
        help="episodes per seed dialogue (the run's `episodes`); default: enough for >= 16 C episodes",
    )
    parser.add_argument("--horizon", type=int, default=4, help="env.horizon: steps per episode")
    parser.add_argument("--fault-rate", type=float, default=0.05, help="share of 500s + 429s in the faulty run")
    parser.add_argument("--rounds", type=int, default=1, help="timed runs per scenario (the median is reported)")
    args = parser.parse_args()
    for noisy in ("httpx", "openai"):  # as `rescue rollout` does: no line per request
        logging.getLogger(noisy).setLevel(logging.WARNING)

    seeds = len(load_dialogues())
    per_seed = args.episodes or math.ceil(16 * args.concurrency / seeds)
    total = per_seed * seeds
    ideal = args.concurrency / args.latency
    print(
        f"C={args.concurrency}  L={args.latency}s  {seeds} seed dialogues x {per_seed} episodes = {total}"
        f" episodes of {args.horizon} steps  ideal C/L = {ideal:.0f} req/s  ({os.cpu_count()} CPUs)"
    )
    half = args.fault_rate / 2
    scenarios = {
        "no faults": [],
        f"{args.fault_rate:.0%} faults": [f"server_error={half}", f"rate_limit={half}"],
    }
    rows = []
    for label, faults in scenarios.items():
        process, base_url = serve(args.latency, faults)
        rounds = []
        try:
            with tempfile.TemporaryDirectory(prefix="llm_rollout_bench_") as tmp:
                rollout(base_url, args, 1, Path(tmp) / "warmup")
                for r in range(args.rounds):
                    rounds.append(rollout(base_url, args, per_seed, Path(tmp) / f"timed{r}"))
        finally:
            process.terminate()
            process.wait()
        shares = sorted(u["calls"] / u["wall_s"] / ideal for u, _, _ in rounds)
        usage, whole, cpu = sorted(rounds, key=lambda x: x[0]["calls"] / x[0]["wall_s"])[len(rounds) // 2]
        wall, calls, episodes = usage["wall_s"], usage["calls"], usage["episodes_run"]
        rows.append([
            label, episodes, calls, f"{wall:.1f}", f"{episodes / wall:.1f}", f"{calls / wall:.0f}", f"{ideal:.0f}",
            f"{calls / wall / ideal:.1%}", f"{shares[0]:.1%}-{shares[-1]:.1%}", usage["retries"], usage["failures"],
            usage["episodes_failed"], f"{whole:.1f}", f"{cpu:.1f}",
        ])
    print(tabulate(rows, headers=[
        "run", "episodes", "requests", "wall s", "episodes/s", "requests/s", "ideal req/s",
        "share of ideal", "range", "retries", "failures", "failed episodes", "run() s", "client CPU s",
    ], disable_numparse=True))


if __name__ == "__main__":
    main()
