"""Run folders know their config: each resumable command records, in its run folder, the
settings that define its results, and a rerun in that folder with other settings is refused.

- ``rescue rollout`` → ``run_config.json``; resumable state: the episodes file
  (``episodes.jsonl.gz`` or ``episodes.jsonl``: :func:`rescue_env.rollout.episodes_file`;
  a folder holding both is refused unless started afresh).
- ``rescue eval-tasks`` → ``run.json`` (key ``"config"``, beside the runner's own keys);
  resumable state: ``details.jsonl``.
- ``rescue judge`` → ``judge_config.json``; outputs: ``judgements.jsonl`` and the rest.
- ``rescue train`` → ``train_config.json``; results: ``model.zip``, ``metrics.json``,
  ``checkpoints/``. A rerun replaces them rather than adding to them, so a folder holding
  them without a record (a run of an older version) is refused too; ``resume=`` a checkpoint
  may continue in the same folder (``total_timesteps``, the run's extent, may grow).

What defines results is everything but presentation (``progress``, ``report``…), resources
(``llm.max_concurrency``, timeouts, retries, the cache…) and the run's *extent* (the number
of episodes, the agents compared, the tasks): a rerun may add episodes, agents or tasks to
a folder, not change what its finished ones mean. ``overwrite=true`` starts the folder
afresh (its resumable state is removed, the other outputs are rewritten by the run).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rescue_env.experiments.errors import UserError
from rescue_env.atomic import atomic_write_text
from rescue_env.rollout import EPISODES_FILES, episodes_file

log = logging.getLogger(__name__)

#: LLM settings that change how calls are made, not what they answer.
LLM_RESOURCE_KEYS = (
    "base_url", "api_key_env", "timeout_s", "call_timeout_s", "max_concurrency", "max_retries",
    "backoff_initial_s", "backoff_max_s", "cache_dir", "cache_mode", "price_per_1k_input", "price_per_1k_output",
)


@dataclass(frozen=True)
class RecordSpec:
    """Where a command keeps its record, what it guards, and how it reads a config."""

    file: str
    #: files whose presence means the folder holds results of an earlier run
    state: tuple[str, ...]
    defining: Callable[[DictConfig], dict[str, Any]]
    #: the record sits under this key of ``file`` (which holds other keys), or at its top
    key: str | None = None
    #: the override that starts the folder afresh
    fresh: str = "overwrite=true"
    #: called on a folder whose state a run would continue: raises for a state no run can
    #: continue (a rollout folder holding both episodes files)
    check_state: Callable[[Path], Any] | None = None
    #: a rerun replaces the state rather than continuing it: state without a record is refused
    replaces: bool = False
    #: the paths a run reads (a checkpoint to resume from): ``fresh`` refuses to remove them
    reads: Callable[[DictConfig], list[Any]] | None = None


def _container(cfg: DictConfig) -> dict[str, Any]:
    out = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(out, dict)
    return out


def _resolved_path(value: Any) -> Any:
    """A data or policy path as an absolute path (null stays null: the bundled seeds; a list
    of data paths, each resolved)."""
    if value in (None, ""):
        return None
    if isinstance(value, (list, tuple)):
        return [_resolved_path(v) for v in value]
    return str(Path(str(value)).expanduser().resolve())


def _llm_defining(llm: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in llm.items() if k not in LLM_RESOURCE_KEYS}


def rollout_defining(cfg: DictConfig) -> dict[str, Any]:
    """The rollout settings that define its episodes."""
    c = _container(cfg)
    uses_llm = c["dynamics"]["name"] == "llm" or c["agent"].get("name") == "llm" or "llm" in (c.get("agents") or [])
    agent = dict(c["agent"])
    agent.pop("name", None)  # extent: which agents run
    agent["policy"] = _resolved_path(agent.get("policy"))
    if not uses_llm:
        agent.pop("window", None)
        agent.pop("show_state", None)
    out = {
        "data": {"path": _resolved_path(c["data"]["path"])},
        "env": c["env"],
        "dynamics": {**c["dynamics"], "params": _resolved_path(c["dynamics"].get("params"))},
        "reward": c["reward"],
        "agent": agent,
        "policy": _resolved_path(c.get("policy")),
        "seed": c["seed"],
        "imitation_data": _resolved_path(c.get("imitation_data")),
    }
    if uses_llm:
        out["llm"] = _llm_defining(c["llm"])
    return out


def eval_tasks_defining(cfg: DictConfig) -> dict[str, Any]:
    """The eval-tasks settings that define its answers (the tasks run are its extent)."""
    c = _container(cfg)
    predictor = str(c.get("predictor"))
    out: dict[str, Any] = {
        "data": _resolved_path((c.get("data") or {}).get("path")),
        "fit_data": _resolved_path(c.get("fit_data")),
        "predictor": predictor,
        "profile": c.get("profile"),
        "seed": c.get("seed"),
        "judge": c.get("judge"),
        "bertscore": c.get("bertscore"),
    }
    if predictor == "agent":
        out["agent"] = c.get("agent")
    if predictor == "llm" or c.get("judge") == "llm" or (predictor == "agent" and (c.get("agent") or {}).get("name") == "llm"):
        out["llm"] = _llm_defining(c.get("llm") or {})
        out["batch_size"] = c.get("batch_size")
        out["judge_batch_size"] = c.get("judge_batch_size")
    return out


def judge_defining(cfg: DictConfig) -> dict[str, Any]:
    """The judge settings that define its scores."""
    c = _container(cfg)
    skip = {"run_dir", "progress", "update_report", "overwrite", "client_factory", "llm", "data"}
    out = {k: v for k, v in c.items() if k not in skip}
    out["data"] = None if c.get("run_dir") else _resolved_path((c.get("data") or {}).get("path"))
    if c.get("scorer") == "llm" or (c.get("twins") or {}).get("generator") == "llm" or (c.get("twins") or {}).get("responder") == "llm":
        out["llm"] = _llm_defining(c.get("llm") or {})
    return out


def train_defining(cfg: DictConfig) -> dict[str, Any]:
    """The train settings that define its model and metrics: all but presentation and
    resources (progress, tracking, threads, checkpoints, the periodic evaluation) and the
    extent a resumed run may grow (``total_timesteps``, ``resume``)."""
    c = _container(cfg)
    skip = {"progress", "tracking", "torch_threads", "checkpoint_freq", "eval_freq", "task_eval", "resume", "total_timesteps", "overwrite", "experiment"}
    out = {k: v for k, v in c.items() if k not in skip}
    out["data"] = {**(c.get("data") or {}), "path": _resolved_path((c.get("data") or {}).get("path"))}
    if isinstance(c.get("prior"), dict):
        out["prior"] = {**c["prior"], "path": _resolved_path(c["prior"].get("path"))}
    return out


SPECS: dict[str, RecordSpec] = {
    "rollout": RecordSpec("run_config.json", EPISODES_FILES, rollout_defining, check_state=episodes_file),
    "eval_tasks": RecordSpec("run.json", ("details.jsonl",), eval_tasks_defining, key="config", fresh="resume=false"),
    "judge": RecordSpec("judge_config.json", ("judgements.jsonl",), judge_defining),
    "train": RecordSpec("train_config.json", ("model.zip", "metrics.json", "checkpoints"), train_defining, replaces=True,
                        reads=lambda cfg: [cfg.get("resume")]),
}


def differences(old: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two JSON-like trees."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new), key=str):
            out.extend(differences(old.get(k), new.get(k), f"{prefix}.{k}" if prefix else str(k)))
        return out
    return [] if old == new else [prefix or "(config)"]


def read_record(spec: RecordSpec, folder: Path) -> dict[str, Any] | None:
    """The defining config recorded in ``folder`` (None when there is none)."""
    path = folder / spec.file
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{path} cannot be read ({exc}); use another hydra.run.dir=, or {spec.fresh}") from None
    if spec.key is not None:
        data = data.get(spec.key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else None


def write_record(spec: RecordSpec, folder: Path, defining: dict[str, Any]) -> Path:
    """Store ``defining`` as the folder's record (atomically; other keys of a shared file kept)."""
    path = folder / spec.file
    data: Any = defining
    if spec.key is not None:
        try:
            data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        except (OSError, json.JSONDecodeError):
            data = {}
        data = {**(data if isinstance(data, dict) else {}), spec.key: defining}
    folder.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def check_run_folder(command: str, cfg: DictConfig, folder: Path) -> None:
    """Refuse to reuse ``folder`` for a config that differs from the one its results were
    made with; with ``overwrite=true`` remove its resumable state instead. Records the
    config when the run may go on."""
    spec = SPECS.get(command.replace("-", "_"))
    if spec is None:
        return
    defining = spec.defining(cfg)
    # eval-tasks' resume=false is its way of starting afresh
    overwrite = bool(OmegaConf.select(cfg, "overwrite", default=False)) or OmegaConf.select(cfg, "resume", default=None) is False
    has_state = any((folder / f).exists() for f in spec.state)
    previous = read_record(spec, folder) if folder.is_dir() else None
    if has_state and previous is not None and not overwrite:
        changed = differences(previous, defining)
        if changed:
            shown = ", ".join(changed[:8]) + (f" (+{len(changed) - 8} more)" if len(changed) > 8 else "")
            raise UserError(
                f"{folder} holds results made with other settings (differing: {shown}); "
                f"give another folder (hydra.run.dir=...) or start this one afresh with {spec.fresh}"
            )
    if has_state and not overwrite and spec.check_state is not None:
        spec.check_state(folder)
    if has_state and previous is None and not overwrite:
        if spec.replaces:
            raise UserError(
                f"{folder} holds results ({', '.join(f for f in spec.state if (folder / f).exists())}) without a record of "
                f"their settings, and this run would replace them; give another folder (hydra.run.dir=...) or start this one afresh with {spec.fresh}"
            )
        log.warning("%s holds results without a record of their config; resuming as asked", folder)
    if overwrite:
        reads = [Path(str(p)).expanduser().resolve() for p in (spec.reads(cfg) if spec.reads else []) if p]
        for f in spec.state:
            state = (folder / f).resolve()
            if read := next((p for p in reads if p == state or state in p.parents), None):
                raise UserError(f"{spec.fresh} would remove {read}, which this run reads; start afresh in another folder "
                                "(hydra.run.dir=...), or continue in this one without it")
        for f in spec.state:
            if (folder / f).is_dir():
                shutil.rmtree(folder / f)
            else:
                (folder / f).unlink(missing_ok=True)
    write_record(spec, folder, defining)
