"""One judge run over a set of dialogues: every mode, one record stream, one summary.

:func:`run_judge` is what ``rescue judge`` calls (the Hydra app only loads data, builds the
client and writes files). It returns a :class:`JudgeRunResult` whose ``records`` are the
lines of ``judgements.jsonl`` (``mode`` = ``absolute`` | ``pairwise`` | ``twins``; absolute
records have ``kind`` = ``item`` or ``anchor``), ``closed_loop`` the per-episode metrics and
``summary`` the content of ``judge_summary.json``.

Every record and the summary carry ``scorer``: ``"llm"`` or ``"offline-heuristic"``.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations
from statistics import mean
from typing import Any, Sequence

from rescue_env.data.schema import Dialogue
from rescue_env.judges import closed_loop as cl
from rescue_env.judges.anchors import ANCHORS
from rescue_env.judges.config import JudgeConfig
from rescue_env.judges.items import JudgeItem, PairMoment, agent_of, items_from_dialogues, pair_moments
from rescue_env.judges.llm_judge import (
    AbsoluteResult,
    BatchReport,
    LLMClientLike,
    LLMJudge,
    PairwiseOutcome,
    batch_report,
    check_anchor,
    length_score_correlation,
    position_bias_report,
    resolve_pair,
    win_table,
)
from rescue_env.judges.offline import OfflineScorer
from rescue_env.judges.rubric import DIMENSIONS, LLM_SCORER, OFFLINE_SCORER, Judgement
from rescue_env.judges.twins import (
    LLMResponder,
    LLMTwinGenerator,
    RecordedResponder,
    TemplateTwinGenerator,
    run_twins,
)

#: |Spearman ρ| between reply length and overall score above which the summary warns.
LENGTH_WARNING = 0.3


@dataclass(slots=True)
class JudgeRunResult:
    records: list[dict[str, Any]]
    closed_loop: list[cl.EpisodeMetrics]
    summary: dict[str, Any]


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, leave=False)


def _sample_per_agent(items: Sequence[JudgeItem], limit: int | None, seed: int) -> list[JudgeItem]:
    if limit is None:
        return list(items)
    by: dict[str, list[int]] = defaultdict(list)
    for k, it in enumerate(items):
        by[it.agent].append(k)
    keep: set[int] = set()
    rng = random.Random(seed)
    for idx in by.values():
        keep.update(idx if len(idx) <= limit else rng.sample(idx, limit))
    return [it for k, it in enumerate(items) if k in keep]


async def run_judge(
    dialogues: Sequence[Dialogue], cfg: JudgeConfig, client: LLMClientLike | None = None
) -> JudgeRunResult:
    """Run the configured modes over ``dialogues`` (episodes of a rollout, or real sessions).

    ``client`` is required when :meth:`JudgeConfig.needs_client`; it is never closed here.
    """
    cfg.check()
    if cfg.needs_client() and client is None:
        raise ValueError("this configuration calls an LLM (scorer=llm or LLM twins) but no client was given")
    judge = LLMJudge(client, cfg.settings(), model=cfg.model or "") if cfg.scorer == "llm" and client is not None else None
    scorer = _Scorer(judge, OfflineScorer())
    summary = _run_summary(dialogues, cfg)
    items = _sample_per_agent(
        items_from_dialogues(dialogues, context_rows=cfg.context_rows, include_history=cfg.include_history),
        cfg.max_items_per_agent,
        cfg.seed,
    )
    summary["n_items"] = len(items)
    records: list[dict[str, Any]] = []
    if "absolute" in cfg.modes:
        summary["absolute"] = await _absolute_mode(items, cfg, scorer, summary["agents"], records)
    if "pairwise" in cfg.modes:
        summary["pairwise"] = await _pairwise_mode(dialogues, cfg, scorer, records)
    if "twins" in cfg.modes:
        summary["twins"] = await _twins_mode(items, cfg, scorer, client, records)
    usage = _llm_usage(client)
    if usage is not None:
        summary["llm_usage"] = usage
    closed = cfg.closed_loop
    episodes = [cl.episode_metrics(d, explore=closed.explore_strategies, advice=closed.advice_strategies) for d in dialogues]
    summary["closed_loop"] = {
        "explore_strategies": list(closed.explore_strategies),
        "advice_strategies": list(closed.advice_strategies),
        "per_agent": cl.summarise(episodes),
    }
    return JudgeRunResult(records, episodes, summary)


@dataclass
class _Scorer:
    """The run's scorer: the LLM judge when there is one, else the offline heuristic."""

    judge: LLMJudge | None
    offline: OfflineScorer

    async def score(self, items: Sequence[JudgeItem]) -> list[Judgement]:
        if self.judge is not None:
            return await self.judge.score(items)
        return self.offline.judge_many(items)


def _run_summary(dialogues: Sequence[Dialogue], cfg: JudgeConfig) -> dict[str, Any]:
    """The head of ``judge_summary.json``: who scored, with what, on what."""
    return {
        "scorer": cfg.scorer_label,
        "scorer_note": (
            "offline heuristic from lexical cues; NOT an LLM judgement" if cfg.scorer == "offline"
            else "LLM judge through the rescue_env.llm client"
        ),
        "judge_model": cfg.model if cfg.scorer == "llm" else None,
        "temperature": cfg.temperature if cfg.scorer == "llm" else None,
        "modes": list(cfg.modes),
        "n_dialogues": len(dialogues),
        "agents": sorted({agent_of(d) for d in dialogues}),
    }


async def _absolute_mode(
    items: Sequence[JudgeItem], cfg: JudgeConfig, scorer: _Scorer, agents: Sequence[str], records: list[dict[str, Any]]
) -> dict[str, Any]:
    """Score every item (anchors mixed in); appends the records, returns the summary."""
    if scorer.judge is not None:
        bar = _progress(len(items), "judge", cfg.progress)
        result = await scorer.judge.judge_items(items, progress=bar.update)
        bar.close()
    else:
        result = _offline_absolute(scorer.offline, items, cfg.anchor_tolerance)
    records.extend(_absolute_records(items, result, cfg.scorer_label, cfg.model or ""))
    return _absolute_summary(items, result, cfg.scorer_label, cfg, agents)


async def _pairwise_mode(dialogues: Sequence[Dialogue], cfg: JudgeConfig, scorer: _Scorer, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Compare agents' replies at the same moments, both orders; appends the records,
    returns the summary (wins, position bias)."""
    agents = sorted({agent_of(d) for d in dialogues})
    if cfg.agents_pair is not None:
        missing = [a for a in cfg.agents_pair if a not in agents]
        if missing:
            raise ValueError(f"agents_pair names {missing} not in this run (agents: {', '.join(agents)})")
        agent_pairs = [tuple(cfg.agents_pair)]
    else:
        agent_pairs = list(combinations(agents, 2))
    pairs: list[PairMoment] = []
    for a, b in agent_pairs:
        ps = pair_moments(dialogues, a, b, context_rows=cfg.context_rows)
        pairs.extend(ps if cfg.pairwise.max_pairs is None else ps[: cfg.pairwise.max_pairs])
    if scorer.judge is not None:
        outcomes = await scorer.judge.compare_many(pairs)
    else:
        outcomes = _offline_pairwise(scorer.offline, pairs, cfg.pairwise.margin)
    records.extend({"mode": "pairwise", "scorer": cfg.scorer_label, **o.to_dict()} for o in outcomes)
    bias = position_bias_report(outcomes)
    bias["applicable"] = scorer.judge is not None
    if scorer.judge is None:
        bias["note"] = "the offline scorer scores each reply on its own; the shown order cannot matter"
    return {
        "agent_pairs": [list(p) for p in agent_pairs],
        "n_pairs": len(pairs),
        "n_exact": sum(1 for p in pairs if p.exact),
        "wins": win_table(outcomes),
        "position_bias": bias,
    }


async def _twins_mode(
    items: Sequence[JudgeItem], cfg: JudgeConfig, scorer: _Scorer, client: LLMClientLike | None, records: list[dict[str, Any]]
) -> dict[str, Any]:
    """Perturbed twins of a seeded sample of each agent's moments; appends the records,
    returns the summary."""
    by_agent: dict[str, list[JudgeItem]] = defaultdict(list)
    for it in items:
        if it.trigger is not None:
            by_agent[it.agent].append(it)
    rng = random.Random(cfg.seed + 7)
    per_agent = cfg.twins.items_per_agent
    chosen = []
    for agent in sorted(by_agent):
        its = by_agent[agent]
        chosen.extend(its if len(its) <= per_agent else rng.sample(its, per_agent))
    generator = LLMTwinGenerator(client, seed=cfg.seed) if cfg.twins.generator == "llm" else TemplateTwinGenerator(cfg.seed)
    responder = LLMResponder(client, seed=cfg.seed) if cfg.twins.responder == "llm" else RecordedResponder()
    twin_records, twin_summary = await run_twins(chosen, generator, responder, scorer.score, template_threshold=cfg.twins.template_threshold)
    records.extend({"mode": "twins", "scorer": cfg.scorer_label, **r.to_dict()} for r in twin_records)
    return {
        "generator": cfg.twins.generator,
        "responder": cfg.twins.responder,
        "responder_note": (
            "recorded: the agent's own reply is replayed for each twin (exact for agents that act on the "
            "state, not the words); similarity 1.0 then means the reply cannot depend on the swapped trigger"
            if cfg.twins.responder == "recorded" else "llm: the configured LLM answered each twin as the therapist"
        ),
        "template_threshold": cfg.twins.template_threshold,
        "per_agent": twin_summary,
        "generator_failures": getattr(generator, "failures", []),
    }


def _llm_usage(client: LLMClientLike | None) -> dict[str, Any] | None:
    """Token and call accounting of the judge's own calls (a :class:`rescue_env.llm.LLMClient`);
    None for a client that does not count them."""
    usage = getattr(client, "usage", None) if client is not None else None
    if not callable(usage):
        return None
    out: dict[str, Any] = {}
    for tag in ("judge:absolute", "judge:pairwise", "judge:twins", "judge:responder"):
        try:
            stats = usage(tag)
            out[tag] = stats.to_dict() if hasattr(stats, "to_dict") else stats
        except Exception:  # accounting is a courtesy; never fail a run over it
            pass
    return out


def run_judge_sync(dialogues: Sequence[Dialogue], cfg: JudgeConfig, client: LLMClientLike | None = None) -> JudgeRunResult:
    """:func:`run_judge` from synchronous code."""
    return asyncio.run(run_judge(dialogues, cfg, client))


# --------------------------------------------------------------------------------------------
# offline stand-ins for the LLM paths


def _offline_absolute(scorer: OfflineScorer, items: Sequence[JudgeItem], tolerance: float) -> AbsoluteResult:
    """Offline absolute scoring; anchors are scored once as a static check of the heuristic
    against the anchors' expected scores (it cannot drift, so nothing is per batch)."""
    judgements = scorer.judge_many(items)
    anchor_js = [scorer.judge(a.item) for a in ANCHORS]
    checks = [check_anchor(a, j) for a, j in zip(ANCHORS, anchor_js)]
    report = batch_report(0, 0, len(items), checks, tolerance)
    return AbsoluteResult(judgements, anchor_js, [report], {i.item_id: 0 for i in items}, {"repeats": 0, "note": "deterministic scorer: repeats skipped"})


def _offline_pairwise(scorer: OfflineScorer, pairs: Sequence[PairMoment], margin: float) -> list[PairwiseOutcome]:
    out = []
    for p in pairs:
        ja, jb = scorer.judge(p.a), scorer.judge(p.b)
        sa, sb = ja.overall or 0.0, jb.overall or 0.0
        v_ab = "A" if sa - sb >= margin else "B" if sb - sa >= margin else "tie"
        v_ba = {"A": "B", "B": "A", "tie": "tie"}[v_ab]
        winner, consistent = resolve_pair(p.pair_id, p.agent_a, p.agent_b, v_ab, v_ba)
        dims = {}
        for d in DIMENSIONS:
            da, db = ja.dimensions[d].score, jb.dimensions[d].score
            dims[d] = p.agent_a if da > db else p.agent_b if db > da else "tie"
        out.append(
            PairwiseOutcome(
                p.pair_id, p.agent_a, p.agent_b, p.exact, p.a.item_id, p.b.item_id, v_ab, v_ba, winner, consistent,
                dims, {"ab": f"offline overall {sa:.2f} vs {sb:.2f}", "ba": f"offline overall {sb:.2f} vs {sa:.2f}"},
            )
        )
    return out


# --------------------------------------------------------------------------------------------
# records and summary


def _absolute_records(items: Sequence[JudgeItem], result: AbsoluteResult, label: str, model: str) -> list[dict[str, Any]]:
    flagged = {(b.pass_no, b.batch) for b in result.batches if b.flagged}
    first_pass = min((b.pass_no for b in result.batches), default=1)
    out = []
    for it, j in zip(items, result.judgements):
        b = result.batch_of.get(it.item_id)
        out.append(
            {
                "mode": "absolute",
                **it.provenance(),
                **j.to_dict(),
                "scorer": label,
                "judge_model": model or None if label == LLM_SCORER else None,
                "batch": b,
                "batch_flagged": (first_pass, b) in flagged,
                "samples": j.samples,
            }
        )
    for j in result.anchor_judgements:
        rec = {"mode": "absolute", "kind": "anchor", "agent": "anchor", **j.to_dict(), "scorer": label}
        out.append(rec)
    return out


def _absolute_summary(
    items: Sequence[JudgeItem], result: AbsoluteResult, label: str, cfg: JudgeConfig, agents: Sequence[str] = ()
) -> dict[str, Any]:
    # every agent of the run gets a row, even one that never spoke (n = 0, means None)
    by: dict[str, list[tuple[JudgeItem, Judgement]]] = {a: [] for a in agents}
    for it, j in zip(items, result.judgements):
        by.setdefault(it.agent, []).append((it, j))
    per_agent: dict[str, Any] = {}
    for agent, pairs in sorted(by.items()):
        ok = [(i, j) for i, j in pairs if j.ok]
        vetoed = [j for _, j in ok if j.veto]
        dims: dict[str, Any] = {}
        for d in DIMENSIONS:
            scores = [j.dimensions[d].score for _, j in ok]
            addr = [j.dimensions[d].addressed for _, j in ok]
            oth = [j.dimensions[d].others for _, j in ok if j.dimensions[d].others is not None]
            dims[d] = {"mean": _m(scores), "addressed_mean": _m(addr), "others_mean": _m(oth), "n_others": len(oth)}
        per_agent[agent] = {
            "n": len(pairs),
            "failed": len(pairs) - len(ok),
            "overall_mean": _m([j.overall for _, j in ok]),
            "overall_mean_excl_veto": _m([j.overall for _, j in ok if not j.veto]),
            "veto_count": len(vetoed),
            "veto_rate": round(len(vetoed) / len(ok), 4) if ok else None,
            "veto_reasons": sorted({j.veto_reason.split(":")[0] for j in vetoed if j.veto_reason}),
            "mean_words": _m([float(i.response_words) for i, _ in pairs]),
            "length_score_correlation": length_score_correlation(
                [i.response_words for i, j in ok], [j.overall for _, j in ok]
            ),
            "dimensions": dims,
        }
    ok_all = [(i, j) for i, j in zip(items, result.judgements) if j.ok]
    static = label == OFFLINE_SCORER
    anchors: dict[str, Any] = {
        "mode": "static check of the heuristic against the anchors" if static else "mixed into every batch",
        "n_anchors": len(ANCHORS),
        "anchors_per_batch": 0 if static else cfg.anchors_per_batch,
        "tolerance": cfg.anchor_tolerance,
        "n_batches": len(result.batches),
        "flagged_batches": [] if static else [b.to_dict() for b in result.flagged_batches],
        "n_flagged": 0 if static else len(result.flagged_batches),
        "mean_anchor_mae": _m([b.anchor_mae for b in result.batches if b.anchor_mae is not None]),
        "mean_anchor_bias": _m([b.anchor_bias for b in result.batches if b.anchor_bias is not None]),
        "batches": [_brief(b) for b in result.batches],
    }
    corr = length_score_correlation([i.response_words for i, _ in ok_all], [j.overall for _, j in ok_all])
    rho = corr["spearman"]
    return {
        "n_items": len(items),
        "failed": len(items) - len(ok_all),
        "veto_count": sum(1 for _, j in ok_all if j.veto),
        "overall_mean": _m([j.overall for _, j in ok_all]),
        "length_score_correlation": corr,
        # |ρ| ≥ LENGTH_WARNING: longer replies score higher (or lower) across the run; read
        # some replies before trusting the ranking (it can be real: good replies say more).
        "length_bias_warning": rho is not None and abs(rho) >= LENGTH_WARNING,
        "per_agent": per_agent,
        "anchors": anchors,
        "repeats": result.repeats,
    }


def _brief(b: BatchReport) -> dict[str, Any]:
    return {
        "pass": b.pass_no, "batch": b.batch, "n_items": b.n_items, "anchor_mae": _r(b.anchor_mae),
        "anchor_bias": _r(b.anchor_bias), "veto_mismatches": b.veto_mismatches, "flagged": b.flagged, "reason": b.reason,
    }


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 4)


def _m(vals: Sequence[float | None]) -> float | None:
    v = [float(x) for x in vals if x is not None]
    return round(mean(v), 4) if v else None
