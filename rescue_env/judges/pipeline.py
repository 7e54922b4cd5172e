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
from dataclasses import dataclass, field
from itertools import combinations
from statistics import mean
from typing import Any, Sequence

from rescue_env.data.schema import Dialogue
from rescue_env.judges import closed_loop as cl
from rescue_env.judges.anchors import ANCHORS
from rescue_env.judges.items import JudgeItem, PairMoment, agent_of, items_from_dialogues, pair_moments
from rescue_env.judges.llm_judge import (
    AbsoluteResult,
    BatchReport,
    JudgeSettings,
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

MODES = ("absolute", "pairwise", "twins")
#: |Spearman ρ| between reply length and overall score above which the summary warns.
LENGTH_WARNING = 0.3
SCORERS = ("offline", "llm")


@dataclass(slots=True)
class JudgeConfig:
    """Settings of a judge run (mirrors ``conf/judge.yaml``; see there for each option).

    Raises ``ValueError`` from :meth:`check` on an unknown scorer, mode, generator or
    responder, or out-of-range numbers.
    """

    scorer: str = "offline"
    modes: list[str] = field(default_factory=lambda: ["absolute"])
    repeats: int = 0
    repeat_items: int = 10
    anchors_per_batch: int = 2
    batch_size: int = 16
    anchor_tolerance: float = 0.75
    agents_pair: list[str] | None = None
    context_rows: int = 6
    include_history: bool = False
    max_items_per_agent: int | None = None
    max_pairs: int | None = 50
    twins_items_per_agent: int = 10
    twins_generator: str = "template"
    twins_responder: str = "recorded"
    template_threshold: float = 0.9
    pairwise_margin: float = 0.25
    explore_strategies: list[str] = field(default_factory=lambda: list(cl.EXPLORE_STRATEGIES))
    advice_strategies: list[str] = field(default_factory=lambda: list(cl.ADVICE_STRATEGIES))
    seed: int = 0
    temperature: float = 0.0
    model: str = ""
    progress: bool = True

    def check(self) -> JudgeConfig:
        if self.scorer not in SCORERS:
            raise ValueError(f"scorer={self.scorer!r}: expected one of {', '.join(SCORERS)}")
        bad = [m for m in self.modes if m not in MODES]
        if bad or not self.modes:
            raise ValueError(f"modes={self.modes!r}: expected a non-empty list drawn from {', '.join(MODES)}")
        if self.twins_generator not in ("template", "llm"):
            raise ValueError(f"twins.generator={self.twins_generator!r}: expected template or llm")
        if self.twins_responder not in ("recorded", "llm"):
            raise ValueError(f"twins.responder={self.twins_responder!r}: expected recorded or llm")
        if self.agents_pair is not None and (len(self.agents_pair) != 2 or self.agents_pair[0] == self.agents_pair[1]):
            raise ValueError(f"agents_pair={self.agents_pair!r}: expected two different agent names, or null for all pairs")
        JudgeSettings(self.batch_size, self.anchors_per_batch, self.anchor_tolerance, self.repeats, self.repeat_items, self.seed)
        return self

    @property
    def scorer_label(self) -> str:
        return OFFLINE_SCORER if self.scorer == "offline" else LLM_SCORER

    def needs_client(self) -> bool:
        return self.scorer == "llm" or (
            "twins" in self.modes and (self.twins_generator == "llm" or self.twins_responder == "llm")
        )


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
    label = cfg.scorer_label
    settings = JudgeSettings(cfg.batch_size, cfg.anchors_per_batch, cfg.anchor_tolerance, cfg.repeats, cfg.repeat_items, cfg.seed)
    judge = LLMJudge(client, settings, model=cfg.model) if cfg.scorer == "llm" and client is not None else None
    offline = OfflineScorer()
    records: list[dict[str, Any]] = []
    summary: dict[str, Any] = {
        "scorer": label,
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
    items = _sample_per_agent(
        items_from_dialogues(dialogues, context_rows=cfg.context_rows, include_history=cfg.include_history),
        cfg.max_items_per_agent,
        cfg.seed,
    )
    summary["n_items"] = len(items)

    async def score(its: Sequence[JudgeItem]) -> list[Judgement]:
        if judge is not None:
            return await judge.score(its)
        return offline.judge_many(its)

    if "absolute" in cfg.modes:
        if judge is not None:
            bar = _progress(len(items), "judge", cfg.progress)
            result = await judge.judge_items(items, progress=bar.update)
            bar.close()
        else:
            result = _offline_absolute(offline, items, cfg.anchor_tolerance)
        records.extend(_absolute_records(items, result, label, cfg.model))
        summary["absolute"] = _absolute_summary(items, result, label, cfg, summary["agents"])

    if "pairwise" in cfg.modes:
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
            pairs.extend(ps if cfg.max_pairs is None else ps[: cfg.max_pairs])
        if judge is not None:
            outcomes = await judge.compare_many(pairs)
        else:
            outcomes = _offline_pairwise(offline, pairs, cfg.pairwise_margin)
        records.extend({"mode": "pairwise", "scorer": label, **o.to_dict()} for o in outcomes)
        bias = position_bias_report(outcomes)
        bias["applicable"] = judge is not None
        if judge is None:
            bias["note"] = "the offline scorer scores each reply on its own; the shown order cannot matter"
        summary["pairwise"] = {
            "agent_pairs": [list(p) for p in agent_pairs],
            "n_pairs": len(pairs),
            "n_exact": sum(1 for p in pairs if p.exact),
            "wins": win_table(outcomes),
            "position_bias": bias,
        }

    if "twins" in cfg.modes:
        by_agent: dict[str, list[JudgeItem]] = defaultdict(list)
        for it in items:
            if it.trigger is not None:
                by_agent[it.agent].append(it)
        rng = random.Random(cfg.seed + 7)
        chosen = []
        for agent in sorted(by_agent):
            its = by_agent[agent]
            chosen.extend(its if len(its) <= cfg.twins_items_per_agent else rng.sample(its, cfg.twins_items_per_agent))
        generator = LLMTwinGenerator(client, seed=cfg.seed) if cfg.twins_generator == "llm" else TemplateTwinGenerator(cfg.seed)
        responder = LLMResponder(client, seed=cfg.seed) if cfg.twins_responder == "llm" else RecordedResponder()
        twin_records, twin_summary = await run_twins(
            chosen, generator, responder, score, template_threshold=cfg.template_threshold
        )
        records.extend({"mode": "twins", "scorer": label, **r.to_dict()} for r in twin_records)
        summary["twins"] = {
            "generator": cfg.twins_generator,
            "responder": cfg.twins_responder,
            "responder_note": (
                "recorded: the agent's own reply is replayed for each twin (exact for agents that act on the "
                "state, not the words); similarity 1.0 then means the reply cannot depend on the swapped trigger"
                if cfg.twins_responder == "recorded" else "llm: the configured LLM answered each twin as the therapist"
            ),
            "template_threshold": cfg.template_threshold,
            "per_agent": twin_summary,
            "generator_failures": getattr(generator, "failures", []),
        }

    usage = getattr(client, "usage", None) if client is not None else None
    if callable(usage):
        # token and call accounting of the judge's own calls (rescue_env.llm.LLMClient)
        summary["llm_usage"] = {}
        for tag in ("judge:absolute", "judge:pairwise", "judge:twins", "judge:responder"):
            try:
                stats = usage(tag)
                summary["llm_usage"][tag] = stats.to_dict() if hasattr(stats, "to_dict") else stats
            except Exception:  # accounting is a courtesy; never fail a run over it
                pass

    episodes = [cl.episode_metrics(d, explore=cfg.explore_strategies, advice=cfg.advice_strategies) for d in dialogues]
    summary["closed_loop"] = {
        "explore_strategies": list(cfg.explore_strategies),
        "advice_strategies": list(cfg.advice_strategies),
        "per_agent": cl.summarise(episodes),
    }
    return JudgeRunResult(records, episodes, summary)


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
