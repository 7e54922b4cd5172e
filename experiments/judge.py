"""``rescue judge``: score the therapist's replies of a rollout folder (or of real sessions)
with the support-quality rubric, and ``rescue judge agreement``: compare with human raters.

    rescue judge run_dir=runs/my-rollout                      # offline heuristic scorer
    rescue judge run_dir=runs/my-rollout scorer=llm llm.base_url=http://127.0.0.1:8000/v1
    rescue judge data.path=benchmark_191.jsonl 'modes=[absolute,twins]'
    rescue judge agreement --human human.csv --run runs/my-rollout

Settings: :class:`rescue_env.experiments.config.JudgeAppConfig` (the run's own, listed in
:class:`rescue_env.judges.JudgeConfig`), composed by ``conf/judge.yaml``. The work is done by :func:`rescue_env.judges.run_judge`;
this module loads the inputs, builds the LLM client when needed and writes the files.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import inspect
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from rescue_env.experiments.config import register_configs
from rescue_env.experiments.errors import UserError, user_errors
from rescue_env.judges.config import JudgeConfig
from rescue_env.judges.pipeline import run_judge
from rescue_env.judges.report import write_outputs


def _out_dir_resolver(run_dir: Any, default: str) -> str:
    # Hydra's run dir is the rollout folder when one is judged, so nothing lands elsewhere.
    return default if run_dir in (None, "", "None", "null") else str(run_dir)


OmegaConf.register_new_resolver("judge_out_dir", _out_dir_resolver, replace=True)
register_configs()


def judge_config(cfg: DictConfig) -> JudgeConfig:
    """The library config of a composed ``rescue judge`` config (checked: ``ValueError``
    naming the setting); the judge model's name defaults to ``llm.model``."""
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(JudgeConfig)}
    settings = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(JudgeConfig), values))
    assert isinstance(settings, JudgeConfig)
    if settings.model is None:
        settings.model = str(cfg.llm.model or "")
    return settings


def load_inputs(cfg: DictConfig):
    """The dialogues to judge: the episodes file of ``run_dir`` (gzip or plain:
    :func:`rescue_env.rollout.episodes_file`), else ``data.path`` (or the seeds)."""
    from rescue_env.data import load_dialogues
    from rescue_env.rollout import episodes_file

    if cfg.run_dir:
        episodes = episodes_file(str(cfg.run_dir))
        if not episodes.is_file():
            raise UserError(
                f"{episodes} not found (nor the plain episodes.jsonl); run_dir must be a `rescue rollout` folder "
                "(or leave run_dir unset and give data.path=DIALOGUES)"
            )
        return load_dialogues(episodes)
    return load_dialogues(cfg.data.path, strict=bool(cfg.data.get("strict", False)))


def make_client(cfg: DictConfig) -> Any:
    """An LLM client for the judge: ``client_factory`` ("module:function", called with the llm
    config as a plain dict) or ``rescue_env.llm.LLMClient`` built from the ``llm`` group. The
    judge's ``temperature`` is written into the llm config first, so the judge always runs
    at its own fixed temperature whatever the llm group says."""
    llm_cfg = OmegaConf.to_container(cfg.llm, resolve=True) if "llm" in cfg else {}
    assert isinstance(llm_cfg, dict)
    llm_cfg["temperature"] = float(cfg.temperature)
    if cfg.get("client_factory"):
        module, _, func = str(cfg.client_factory).partition(":")
        if not func:
            raise UserError(f"client_factory={cfg.client_factory!r}: expected 'module:function'")
        return getattr(importlib.import_module(module), func)(llm_cfg)
    try:
        from rescue_env.llm import LLMClient, LLMConfig
    except ImportError as e:
        raise UserError(
            f"scorer=llm needs the LLM layer (rescue_env.llm), which is not available ({e}). "
            "Use scorer=offline, or give client_factory=module:function."
        ) from None
    known = set(inspect.signature(LLMConfig).parameters)
    return LLMClient(LLMConfig(**{k: v for k, v in llm_cfg.items() if k in known}))


async def _run_async(cfg: DictConfig, jcfg: JudgeConfig, dialogues, client: Any):
    own_client = client is None and jcfg.needs_client()
    if own_client:
        client = make_client(cfg)
    try:
        return await run_judge(dialogues, jcfg, client)
    finally:
        if own_client:
            closer = getattr(client, "aclose", None) or getattr(client, "close", None)
            if closer is not None:
                res = closer()
                if asyncio.iscoroutine(res):
                    await res


def run(cfg: DictConfig, *, out_dir: str | Path | None = None, client: Any = None) -> dict[str, Path]:
    """Everything ``rescue judge`` does, callable without Hydra's CLI (tests compose ``cfg``).

    Output goes to ``run_dir`` when set, else ``out_dir``, else Hydra's run directory.
    ``client`` overrides the configured LLM client (tests pass a fake).
    """
    jcfg = judge_config(cfg)
    dialogues = load_inputs(cfg)
    if cfg.run_dir:
        target = Path(str(cfg.run_dir))
    elif out_dir is not None:
        target = Path(out_dir)
    else:
        from hydra.core.hydra_config import HydraConfig

        target = Path(HydraConfig.get().runtime.output_dir)
    result = asyncio.run(_run_async(cfg, jcfg, dialogues, client))
    paths = write_outputs(
        target,
        result.records,
        result.summary,
        [e.to_dict() for e in result.closed_loop],
        update_report=bool(cfg.get("update_report", True)),
    )
    print(summary_table(result.summary))
    print(f"judge outputs in {target}")
    return paths


def summary_table(summary: dict[str, Any]) -> str:
    """The per-agent table printed at the end of a run."""
    from tabulate import tabulate

    from rescue_env.judges.report import scorer_title
    from rescue_env.judges.rubric import DIMENSIONS

    lines = [f"Support quality — scorer: {summary['scorer']} ({scorer_title(summary['scorer'])})"]
    ab = summary.get("absolute")
    if ab:
        rows = []
        for agent, s in ab["per_agent"].items():
            rows.append([agent, s["n"], s["overall_mean"], s["veto_count"], *[s["dimensions"][d]["mean"] for d in DIMENSIONS]])
        lines.append(tabulate(rows, headers=["agent", "replies", "overall", "vetoes", *DIMENSIONS], floatfmt=".2f"))
        c = ab["length_score_correlation"]
        lines.append(
            f"length–score correlation: spearman {c['spearman']}, pearson {c['pearson']} (n={c['n']}); "
            f"flagged batches: {ab['anchors']['n_flagged']}/{ab['anchors']['n_batches']}"
            + ("  [warning: scores track reply length]" if ab.get("length_bias_warning") else "")
        )
    pw = summary.get("pairwise")
    if pw:
        lines.append(f"pairwise: {pw['n_pairs']} pairs; position bias {pw['position_bias']['first_position_share']}, "
                     f"consistency {pw['position_bias']['consistency']}")
    tw = summary.get("twins")
    if tw:
        for agent, roles in tw["per_agent"].items():
            lines.append(
                f"twins {agent}: event sim {roles['event']['mean_similarity']} gap {roles['event']['mean_abs_gap']}; "
                f"emotion sim {roles['emotion']['mean_similarity']} gap {roles['emotion']['mean_abs_gap']}"
            )
    cl = summary.get("closed_loop", {}).get("per_agent", {})
    if cl:
        rows = [[a, s["episodes"], s["group_reduction"], s["worst_off_reduction"], s["healthy_share"], s["advice_share"],
                 s["explored_before_advice_share"], s["advice_position"]] for a, s in cl.items()]
        lines.append(tabulate(rows, headers=["agent", "episodes", "group distress ↓", "worst-off ↓", "healthy path",
                                             "advice given", "explored first", "advice pos"], floatfmt=".3f"))
    return "\n".join(lines)


@hydra.main(version_base="1.3", config_path="pkg://rescue_env.conf", config_name="judge")
@user_errors
def hydra_main(cfg: DictConfig) -> None:
    """The Hydra app behind ``rescue judge``."""
    run(cfg)


def main() -> int:
    """Entry point: ``agreement`` goes to :func:`agreement_main` (argparse), anything else is
    the Hydra app (``sys.argv`` holds the overrides)."""
    if len(sys.argv) > 1 and sys.argv[1] == "agreement":
        return agreement_main(sys.argv[2:])
    hydra_main()
    return 0


def agreement_main(argv: list[str]) -> int:
    """``rescue judge agreement --human H.csv [--judge J.csv | --run DIR] [--out DIR]``.

    Prints the per-dimension table (κ ≥ 0.6 marked) and the adjudication list, and writes
    ``agreement.json`` into ``--out`` (default: the run folder, else the current directory).
    Returns 0, or 2 on bad input (the message names the file, line and problem).
    """
    from rescue_env.judges.agreement import (
        AgreementInputError,
        compute_agreement,
        format_agreement,
        judge_ratings_from_judgements,
        read_judgements,
        read_scores,
        write_agreement,
    )

    parser = argparse.ArgumentParser(
        prog="rescue judge agreement",
        description="Agreement of judge scores with human raters: exact, MAE, quadratic-weighted Cohen's kappa.",
    )
    parser.add_argument("--human", required=True, help="CSV item_id,dimension,rater,score (integers 0-4)")
    parser.add_argument("--judge", help="judge scores in the same CSV shape (default: the run's judgements.jsonl)")
    parser.add_argument("--run", help="a judged run folder (holding judgements.jsonl); default: current directory")
    parser.add_argument("--out", help="where to write agreement.json (default: --run, else current directory)")
    parser.add_argument("--threshold", type=float, default=0.6, help="kappa line to mark (default 0.6)")
    args = parser.parse_args(argv)
    try:
        human = read_scores(args.human, integer=True)
        if args.judge:
            judge = read_scores(args.judge, integer=False)
        else:
            jpath = Path(args.run or ".") / "judgements.jsonl"
            if not jpath.is_file():
                print(f"rescue judge agreement: no --judge CSV and no {jpath}; run `rescue judge` first or pass --judge",
                      file=sys.stderr)
                return 2
            judge = judge_ratings_from_judgements(read_judgements(jpath))
    except (AgreementInputError, FileNotFoundError) as e:
        print(f"rescue judge agreement: {e}", file=sys.stderr)
        return 2
    report = compute_agreement(human, judge, threshold=args.threshold)
    print(format_agreement(report))
    out = write_agreement(report, args.out or args.run or ".")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
