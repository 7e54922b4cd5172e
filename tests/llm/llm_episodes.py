"""Helpers of the LLM episode tests (a module of its own: ``conftest`` names collide): a
responder whose replies vary like a model's but depend only on the request, a small seed
data file, and an in-process ``rescue`` runner."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

from rescue_cli_helpers import Run, invoke  # noqa: F401  (re-exported for the LLM tests)

#: A fake API key; no file or log line of a run may contain it.
SENTINEL = "sk-SENTINEL-llm-path-3d9f0b7a"

WORDS = ["I feel unheard.", "You never listen to me.", "I want us to try again.", "hurt and tired", "hopeful, a little"]


def random_instance(node: dict[str, Any], rng: random.Random) -> Any:
    """A value valid for ``node`` with the variety of a model's answer (enums drawn,
    integers and numbers across their range, arrays of varied length)."""
    if "enum" in node:
        return rng.choice(node["enum"])
    kind = node.get("type")
    if kind == "object":
        return {k: random_instance(v, rng) for k, v in node["properties"].items()}
    if kind == "array":
        count = rng.randint(node.get("minItems", 0), node.get("maxItems", 3))
        return [random_instance(node["items"], rng) for _ in range(count)]
    if kind == "integer":
        return rng.randint(node.get("minimum", 0), node.get("maximum", 10))
    if kind == "number":
        return round(rng.uniform(node.get("minimum", 0), node.get("maximum", 1)), 3)
    if kind == "boolean":
        return rng.random() < 0.6
    return rng.choice(WORDS)


def varied_responder(body: dict[str, Any]) -> dict[str, Any] | str:
    """Replies that depend only on the request's messages and schema: the same request gets
    the same reply whatever the arrival order (concurrent runs stay comparable)."""
    response_format = body.get("response_format") or {}
    if response_format.get("type") != "json_schema":
        return "ok"
    schema = response_format["json_schema"]["schema"]
    digest = hashlib.sha256(json.dumps([body["messages"], schema], sort_keys=True).encode()).hexdigest()
    return random_instance(schema, random.Random(digest))


def small_data(directory: Path) -> Path:
    """One couple and the smallest family of the bundled seeds, as a JSONL file."""
    from rescue_env.data import load_dialogues, write_jsonl

    seeds = load_dialogues()
    couple = next(d for d in seeds if d.scenario == "couple")
    family = min((d for d in seeds if d.scenario == "family"), key=lambda d: len(d.participants))
    path = directory / "small.jsonl"
    write_jsonl([couple, family], path)
    return path


def llm_args(base_url: str, data: Path, run_dir: Path, *extra: str) -> list[str]:
    """``rescue rollout`` overrides of a tiny LLM run against ``base_url``."""
    return [
        "rollout",
        f"hydra.run.dir={run_dir}",
        "dynamics=llm",
        "agent=llm",
        f"llm.base_url={base_url}",
        "llm.model=mock",
        "llm.timeout_s=5",
        "llm.backoff_initial_s=0.01",
        "llm.backoff_max_s=0.05",
        f"data.path={data}",
        "episodes=2",
        "env.horizon=3",
        "env.terminate_on_settle=false",
        "progress=false",
        *extra,
    ]


def lines_of(path: Path) -> list[dict[str, Any]]:
    """The episodes of a run's episodes file (gzip or plain)."""
    from rescue_env.jsonl import read_objects

    return [obj for _, obj in read_objects(path)]


def keys_of(path: Path) -> list[str]:
    return [f"rollout/{o['agent']}/{o['seed_sample_id']}/ep{o['episode']}" for o in lines_of(path)]
