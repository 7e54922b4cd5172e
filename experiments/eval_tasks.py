"""``rescue eval-tasks``: the six RESCUE-BENCH tasks on a data set, as a Hydra app.

    rescue eval-tasks data.path=benchmark_191.jsonl predictor=prior
    rescue eval-tasks predictor=agent agent=imitation profile=released tasks=[itp,stp,ssp]
    rescue eval-tasks predictor=llm llm.base_url=http://127.0.0.1:8000/v1 llm.model=qwen judge=llm
    rescue eval-tasks ... hydra.run.dir=runs/x        # run again there to resume

Writes ``tasks.json``, ``details.jsonl`` and ``run.json`` in the run folder and prints the
table beside the paper's figures (see :mod:`rescue_env.tasks.runner`).
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from rescue_env.experiments.config import register_configs
from rescue_env.experiments.errors import user_errors
from rescue_env.experiments.run_record import eval_tasks_defining
from rescue_env.data import Dialogue, describe_data_path, load_dialogues
from rescue_env.tasks import (
    AgentPredictor,
    LLMJudge,
    LLMPredictor,
    make_baseline,
    run_tasks,
)
from rescue_env.tasks.instances import check_profile, check_task
from rescue_env.tasks.predictors import BASELINES

PREDICTORS = (*BASELINES, "agent", "llm")
register_configs()  # the eval_tasks_schema the YAML starts from


def make_llm_client(llm_cfg: Any) -> Any:
    """A ``rescue_env.llm.LLMClient`` from the ``llm`` config group."""
    try:
        from rescue_env.llm import LLMClient, LLMConfig
    except ImportError as exc:
        raise RuntimeError(f"predictor=llm / judge=llm need the LLM layer rescue_env.llm ({exc})") from exc
    fields = OmegaConf.to_container(llm_cfg, resolve=True) if isinstance(llm_cfg, DictConfig) else dict(llm_cfg)
    known = set(inspect.signature(LLMConfig).parameters)
    return LLMClient(LLMConfig(**{k: v for k, v in fields.items() if k in known}))


def _agent_settings(cfg: DictConfig) -> tuple[str, dict[str, Any]]:
    """Agent name and keyword settings, from the ``agent`` group or a plain string."""
    node = cfg.get("agent")
    if isinstance(node, str):
        return node, {}
    settings = OmegaConf.to_container(node, resolve=True) if node is not None else {}
    name = settings.pop("name", None) if isinstance(settings, dict) else None
    if not name:
        raise ValueError("predictor=agent needs an agent: agent=heuristic|imitation|random|never|ppo|maskable_ppo")
    return str(name), {k: v for k, v in settings.items() if v is not None}


def make_agent_factory(name: str, settings: dict[str, Any]):
    """``scenario -> agent`` through ``agents.make_agent(name, scenario, **kw)``; only the
    settings ``make_agent`` names are passed (the agent group's LLM-therapist settings,
    ``window`` and ``show_state``, go to its ``**kwargs`` in rollout only: eval-tasks asks
    the LLM through ``predictor=llm``)."""
    try:
        from rescue_env.agents import make_agent
    except ImportError as exc:
        raise RuntimeError(f"predictor=agent needs agents.make_agent(name, scenario, **kw), which is not available ({exc})") from exc
    params = inspect.signature(make_agent).parameters
    named = {k for k, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    settings = {k: v for k, v in settings.items() if k in named}
    return lambda scenario: make_agent(name, scenario, **settings)


def build_predictor(cfg: DictConfig, fit_dialogues: list[Dialogue] | None, dialogues: list[Dialogue] | None = None) -> Any:
    """The predictor named by ``cfg.predictor``; ``ValueError`` lists the choices.

    ``fit_dialogues`` (``fit_data``) fit the baselines and the imitation agent's behaviour
    prior (unless ``agent.prior`` names a saved one or ``agent.fit_data`` other data); without
    them they fit on ``dialogues``, the evaluated data, as the majority baseline does."""
    kind = str(cfg.predictor).strip().lower()
    if kind in BASELINES:
        return make_baseline(kind, seed=int(cfg.seed), fit_dialogues=fit_dialogues)
    if kind == "agent":
        name, settings = _agent_settings(cfg)
        settings.setdefault("seed", int(cfg.seed))
        if name == "imitation" and not settings.get("prior") and not settings.get("fit_data"):
            settings["imitation_data"] = fit_dialogues if fit_dialogues is not None else dialogues
        if name == "llm":  # the LLM therapist talks to the server of the `llm` group
            settings["client"] = make_llm_client(cfg.llm)
        return AgentPredictor(make_agent_factory(name, settings), name=name, fit_dialogues=fit_dialogues)
    if kind == "llm":
        client = make_llm_client(cfg.llm)
        return LLMPredictor(client, batch_size=int(cfg.batch_size), seed=int(cfg.seed), name=str(cfg.llm.model))
    raise ValueError(f"unknown predictor {cfg.predictor!r}: expected one of {list(PREDICTORS)}")


def build_judge(cfg: DictConfig, predictor: Any) -> Any:
    """``None`` (the runner's offline embedding judge) or an :class:`LLMJudge`."""
    kind = str(cfg.judge).strip().lower()
    if kind == "embedding":
        return None
    if kind == "llm":
        client = getattr(predictor, "client", None) or make_llm_client(cfg.llm)
        return LLMJudge(client, batch_size=int(cfg.judge_batch_size), seed=int(cfg.seed), name=str(cfg.llm.model))
    raise ValueError(f"unknown judge {cfg.judge!r}: expected 'embedding' or 'llm'")


@hydra.main(version_base="1.3", config_path="pkg://rescue_env.conf", config_name="eval_tasks")
@user_errors
def main(cfg: DictConfig) -> None:
    # Hydra logs at INFO; one line per HTTP request would bury the progress bars.
    for noisy in ("httpx", "httpx2", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    # Check names before loading anything, so a typo fails at once.
    for t in cfg.tasks:
        check_task(t)
    check_profile(cfg.profile)
    if cfg.get("torch_threads"):
        import torch

        torch.set_num_threads(int(cfg.torch_threads))
    # the paper profile counts and excludes out-of-taxonomy RPP gold: such a label is a warning here
    dialogues = load_dialogues(cfg.data.path, strict=bool(cfg.data.get("strict", False)), unknown_patterns="warning")
    fit = load_dialogues(cfg.fit_data, unknown_patterns="warning") if cfg.get("fit_data") else None
    predictor = build_predictor(cfg, fit, dialogues)
    judge = build_judge(cfg, predictor)
    print(f"eval-tasks: {len(dialogues)} dialogues from {describe_data_path(cfg.data.path)}; predictor {predictor.name}; profile {cfg.profile}; out {out_dir}")
    run_tasks(
        dialogues,
        list(cfg.tasks),
        predictor,
        profile=str(cfg.profile),
        out_dir=out_dir,
        resume=bool(cfg.resume),
        progress=bool(cfg.progress),
        judge=judge,
        bertscore="auto" if cfg.bertscore else None,
        concurrency=int(cfg.concurrency),
        retry_failed=bool(cfg.retry_failed),
        # "config": the record the run folder is checked against on a rerun (experiments/run_record.py)
        settings={"data": describe_data_path(cfg.data.path), "seed": int(cfg.seed), "judge": str(cfg.judge), "config": eval_tasks_defining(cfg)},
    )
    print(f"wrote {out_dir / 'tasks.json'} and {out_dir / 'details.jsonl'}")


if __name__ == "__main__":
    main()
