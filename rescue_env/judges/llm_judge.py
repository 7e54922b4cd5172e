"""The LLM judge: rubric prompts, JSON Schemas, anchors, repeats, pairwise, bias checks.

It talks to any object with the LLM layer's interface (:class:`LLMClientLike`; the project's
``rescue_env.llm.LLMClient`` provides it, tests use a fake)::

    result = await client.complete_json(messages, schema, name=..., seed=..., tag=...)
    result.ok, result.data, result.error

Temperature, model, retries and caching are the client's business (the judge app fixes the
temperature in config before building the client); the judge passes a ``seed`` per sample
so repeats are distinct requests, and a ``tag`` (``judge:absolute``, ``judge:pairwise``…) under
which the client accounts the judge's token usage.

Bias controls, each reported rather than silently applied:

- **scores before reasons**: the schema puts all scores (and the veto flag) before the
  free-text reasons, per dimension.
- **length bias**: the prompt tells the judge length is not quality; the run's
  length-score correlation (:func:`length_score_correlation`) shows whether it listened.
- **drift**: calibration anchors (:mod:`~rescue_env.judges.anchors`) are mixed into each
  batch at random positions; a batch whose anchors come back off by more than
  ``anchor_tolerance`` (mean absolute error over the anchors' dimension scores) or with a
  missed/spurious veto is flagged (:class:`BatchReport`).
- **noise**: with ``repeats > 0`` every item gets a second, independently seeded sample;
  the ``repeat_items`` items whose two samples differ most get ``repeats`` more; all of an
  item's samples are averaged (:func:`~rescue_env.judges.rubric.average_judgements`).
- **position bias** (pairwise): every pair is asked in both orders; the share of verdicts
  for the first-shown reply and the order-consistency rate are reported.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Awaitable, Callable, Iterable, Protocol, Sequence

import jsonschema

from rescue_env.judges.anchors import ANCHORS, Anchor
from rescue_env.judges.items import JudgeItem, PairMoment
from rescue_env.judges.rubric import (
    DIMENSIONS,
    LLM_SCORER,
    SCORE_LEVELS,
    DimensionScore,
    Judgement,
    average_judgements,
    render_rubric,
)

# --------------------------------------------------------------------------------------------
# client interface


class LLMResultLike(Protocol):
    ok: bool
    data: dict[str, Any] | None
    error: str | None


class LLMClientLike(Protocol):
    """What the judge needs from the LLM layer (``rescue_env.llm.LLMClient`` provides it)."""

    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: dict[str, Any],
        *,
        name: str,
        seed: int | None = None,
        tag: str | None = None,
    ) -> LLMResultLike: ...


#: Schema names sent with each request kind (servers and caches see them).
ABSOLUTE_NAME = "support_quality_judgement"
PAIRWISE_NAME = "support_quality_pairwise"
#: Usage-accounting tags (``client.usage(tag)``) of the judge's calls.
ABSOLUTE_TAG = "judge:absolute"
PAIRWISE_TAG = "judge:pairwise"

# --------------------------------------------------------------------------------------------
# schemas

_SIDE = {"type": "integer", "enum": list(SCORE_LEVELS)}
_OTHERS = {"type": ["integer", "null"], "enum": [*SCORE_LEVELS, None]}


def _obj(props: dict[str, Any]) -> dict[str, Any]:
    # strict structured outputs need every property required and no extras
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


#: Absolute judgement: scores (addressed / others per dimension) and veto first, reasons after.
ABSOLUTE_SCHEMA: dict[str, Any] = _obj(
    {
        "scores": _obj({d: _obj({"addressed": _SIDE, "others": _OTHERS}) for d in DIMENSIONS}),
        "veto": {"type": "boolean"},
        "reasons": _obj({d: {"type": "string"} for d in DIMENSIONS}),
        "veto_reason": {"type": "string"},
    }
)

_CHOICE = {"type": "string", "enum": ["A", "B", "tie"]}
#: Pairwise verdict: overall and per-dimension choices first, the reason after.
PAIRWISE_SCHEMA: dict[str, Any] = _obj(
    {"winner": _CHOICE, "dimensions": _obj({d: _CHOICE for d in DIMENSIONS}), "reason": {"type": "string"}}
)

# --------------------------------------------------------------------------------------------
# prompts

_LENGTH_RULES = """\
How to judge (read carefully):
- Length is not quality. Judge what the reply does, not how much it says. A one-sentence reply that
  names the feeling and its cause deserves the same recognition score as a paragraph that does the
  same. Padding, stacked techniques, lists of suggestions and therapy jargon earn nothing; when they
  dilute the point or rush past the feeling they cost points.
- Do not reward polish, formality or confident tone. Do not penalise plain, short or informal words.
- Score each dimension on its own anchors; do not let one strong or weak dimension drag the others.
- `addressed` judges the reply toward the member(s) it speaks to. `others` judges its effect on the
  members it does not address (siding, mind-reading them, neglect, letting an attack on them run).
  Set `others` to null when the reply addresses the whole group.
- Use the notes on members' feelings only to check whether the reply recognised them; the therapist
  may not have seen those notes.
- Fill in every score first, then the reasons: one or two sentences per dimension quoting the reply."""

SYSTEM_ABSOLUTE = f"""You rate one therapist reply in a couple or family therapy session against a fixed rubric.
Each dimension is scored 0-4 on two sides, with a behavioural anchor for every level.

{render_rubric()}

{_LENGTH_RULES}"""

SYSTEM_PAIRWISE = f"""You compare two therapist replies, A and B, given at the same moment of a couple or family
therapy session, against this rubric:

{render_rubric()}

{_LENGTH_RULES}
- Which reply is shown first is random and means nothing. Choose "tie" when neither is better.
- A reply that meets a veto criterion loses to any reply that does not."""


def render_moment(item: JudgeItem) -> str:
    """The moment a reply answers: session, members' notes, transcript window, addressees."""
    lines = [f"Session: {item.scenario} therapy. Members: {', '.join(item.members)}."]
    notes = []
    for m in item.members:
        feeling = item.feelings.get(m, "")
        if feeling:
            inten = item.intensity.get(m)
            notes.append(f"- {m}: {feeling}" + (f" (intensity {inten:g}/10)" if inten else ""))
    if notes:
        lines.append("Notes on the members just before the reply (annotations):")
        lines.extend(notes)
    lines.append("Transcript (most recent last):")
    lines.extend(t.render() for t in item.context) if item.context else lines.append("(session start)")
    if item.group_addressed:
        lines.append("The therapist's reply addresses the whole group.")
    else:
        lines.append(
            f"The therapist's reply addresses: {', '.join(item.addressed)}. Not addressed: {', '.join(item.others)}."
        )
    return "\n".join(lines)


def absolute_messages(item: JudgeItem) -> list[dict[str, str]]:
    """Chat messages asking for an absolute judgement of ``item.response``."""
    user = f"{render_moment(item)}\n\n<response>\n{item.response}\n</response>\n\nScore this reply."
    return [{"role": "system", "content": SYSTEM_ABSOLUTE}, {"role": "user", "content": user}]


def pairwise_messages(first: JudgeItem, second: JudgeItem, *, exact: bool) -> list[dict[str, str]]:
    """Chat messages comparing ``first`` (shown as A) with ``second`` (shown as B)."""
    if exact:
        body = f"{render_moment(first)}\n\n<response_a>\n{first.response}\n</response_a>\n\n" \
               f"<response_b>\n{second.response}\n</response_b>"
    else:
        body = (
            "The two replies come at matching points of two sessions that started identically; "
            "their recent context differs slightly.\n\n"
            f"Context of A:\n{render_moment(first)}\n\n<response_a>\n{first.response}\n</response_a>\n\n"
            f"Context of B:\n{render_moment(second)}\n\n<response_b>\n{second.response}\n</response_b>"
        )
    return [
        {"role": "system", "content": SYSTEM_PAIRWISE},
        {"role": "user", "content": body + "\n\nWhich reply better supports the group?"},
    ]


# --------------------------------------------------------------------------------------------
# parsing


class JudgeOutputError(ValueError):
    """The judge's JSON did not match the schema (the message says where)."""


def parse_absolute(item: JudgeItem, data: Any, *, scorer: str = LLM_SCORER) -> Judgement:
    """Turn a reply matching :data:`ABSOLUTE_SCHEMA` into a :class:`Judgement`.

    ``others`` is forced to ``None`` for group-addressed items (nobody was left out).
    Raises :class:`JudgeOutputError` if ``data`` does not match the schema.
    """
    _validate(data, ABSOLUTE_SCHEMA)
    dims = {}
    for d in DIMENSIONS:
        s = data["scores"][d]
        others = None if item.group_addressed or s["others"] is None else float(s["others"])
        dims[d] = DimensionScore(float(s["addressed"]), others, data["reasons"][d])
    return Judgement(
        item_id=item.item_id,
        scorer=scorer,
        dimensions=dims,
        veto=bool(data["veto"]),
        veto_reason=data["veto_reason"] if data["veto"] else "",
    )


def _validate(data: Any, schema: dict[str, Any]) -> None:
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "(root)"
        raise JudgeOutputError(f"judge output does not match the schema at {where}: {e.message}") from None


# --------------------------------------------------------------------------------------------
# reports


@dataclass(slots=True)
class AnchorCheck:
    """One anchor's judged vs expected scores in a batch."""

    anchor_id: str
    expected_overall: float
    judged_overall: float | None
    mae: float | None
    bias: float | None
    veto_expected: bool
    veto_judged: bool | None


@dataclass(slots=True)
class BatchReport:
    """Calibration of one batch: its anchors' error and whether it drifted.

    ``anchor_mae``: mean absolute error over the anchors' ten side scores (addressed and
    others, per dimension); ``anchor_bias``: mean signed error (> 0: the judge was more lenient
    than the anchors say). ``flagged`` when ``anchor_mae > tolerance`` or a veto was missed or
    invented, or every anchor failed.
    """

    pass_no: int
    batch: int
    n_items: int
    anchors: list[AnchorCheck]
    anchor_mae: float | None
    anchor_bias: float | None
    veto_mismatches: int
    flagged: bool
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_anchor(anchor: Anchor, judged: Judgement) -> AnchorCheck:
    """Compare a judged anchor with its expected judgement."""
    exp = anchor.expected
    if not judged.ok:
        return AnchorCheck(anchor.item.meta["anchor_id"], exp.overall or 0.0, None, None, None, exp.veto, None)
    diffs: list[float] = []
    for d in DIMENSIONS:
        e, j = exp.dimensions[d], judged.dimensions[d]
        diffs.append(j.addressed - e.addressed)
        if e.others is not None and j.others is not None:
            diffs.append(j.others - e.others)
    return AnchorCheck(
        anchor_id=anchor.item.meta["anchor_id"],
        expected_overall=float(exp.overall or 0.0),
        judged_overall=judged.overall,
        mae=sum(abs(x) for x in diffs) / len(diffs),
        bias=sum(diffs) / len(diffs),
        veto_expected=exp.veto,
        veto_judged=judged.veto,
    )


def batch_report(pass_no: int, batch: int, n_items: int, checks: list[AnchorCheck], tolerance: float) -> BatchReport:
    """Summarise a batch's anchor checks and decide whether it drifted."""
    good = [c for c in checks if c.mae is not None]
    mae = sum(c.mae for c in good) / len(good) if good else None  # type: ignore[misc]
    bias = sum(c.bias for c in good) / len(good) if good else None  # type: ignore[misc]
    vm = sum(1 for c in good if c.veto_judged != c.veto_expected)
    reasons = []
    if checks and not good:
        reasons.append("every anchor failed")
    if mae is not None and mae > tolerance:
        reasons.append(f"anchor MAE {mae:.2f} > tolerance {tolerance:.2f}")
    if vm:
        reasons.append(f"{vm} anchor veto(es) wrong")
    return BatchReport(pass_no, batch, n_items, checks, mae, bias, vm, bool(reasons), "; ".join(reasons))


def length_score_correlation(lengths: Sequence[float], scores: Sequence[float]) -> dict[str, Any]:
    """Pearson and Spearman correlation of reply length (words) with overall score.

    Returns ``{"n", "pearson", "pearson_p", "spearman", "spearman_p"}``; correlations are
    ``None`` with fewer than 3 points or a constant series. |r| above ~0.3 suggests the judge
    (or the agents' good replies) rewards length: read the replies before concluding.
    """
    from scipy import stats

    pts = [(float(x), float(y)) for x, y in zip(lengths, scores) if y is not None and not math.isnan(float(y))]
    out: dict[str, Any] = {"n": len(pts), "pearson": None, "pearson_p": None, "spearman": None, "spearman_p": None}
    if len(pts) < 3:
        return out
    xs, ys = zip(*pts)
    if len(set(xs)) < 2 or len(set(ys)) < 2:
        return out
    pr = stats.pearsonr(xs, ys)
    sr = stats.spearmanr(xs, ys)
    out.update(
        pearson=round(float(pr.statistic), 4),
        pearson_p=float(pr.pvalue),
        spearman=round(float(sr.statistic), 4),
        spearman_p=float(sr.pvalue),
    )
    return out


# --------------------------------------------------------------------------------------------
# the judge


@dataclass(slots=True)
class JudgeSettings:
    """How the LLM judge batches, calibrates and repeats.

    Attributes:
        batch_size: run items per batch (anchors come on top).
        anchors_per_batch: calibration anchors mixed into each batch (0 disables drift checks;
            use 2 or more so each batch holds a low and a high anchor).
        anchor_tolerance: anchor MAE (0-4 scale) above which a batch is flagged.
        repeats: extra samples for the most variable items (0: one sample per item).
        repeat_items: how many of the most variable items get the extra samples.
        seed: base seed; sample k of an item is requested with ``seed + k``.
    """

    batch_size: int = 16
    anchors_per_batch: int = 2
    anchor_tolerance: float = 0.75
    repeats: int = 0
    repeat_items: int = 10
    seed: int = 0

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be ≥ 1, got {self.batch_size}")
        if self.anchors_per_batch < 0 or self.repeats < 0 or self.repeat_items < 0:
            raise ValueError("anchors_per_batch, repeats and repeat_items must be ≥ 0")
        if self.anchor_tolerance <= 0:
            raise ValueError(f"anchor_tolerance must be > 0, got {self.anchor_tolerance}")


@dataclass(slots=True)
class AbsoluteResult:
    """Absolute-mode output: one averaged judgement per run item (input order), the anchor
    judgements, one :class:`BatchReport` per batch and pass, and the repeats report.
    ``batch_of`` maps an item id to the batch (of pass 1) it was judged in."""

    judgements: list[Judgement]
    anchor_judgements: list[Judgement]
    batches: list[BatchReport]
    batch_of: dict[str, int] = field(default_factory=dict)
    repeats: dict[str, Any] = field(default_factory=dict)

    @property
    def flagged_batches(self) -> list[BatchReport]:
        return [b for b in self.batches if b.flagged]


@dataclass(slots=True)
class PairwiseOutcome:
    """One pair asked in both orders. ``verdict_ab``: the choice when ``agent_a``'s reply was
    shown first (A); ``verdict_ba``: when ``agent_b``'s was. ``winner`` is the agent that won
    in both orders, else ``"tie"`` (also when the two orders disagree: ``consistent`` False)."""

    pair_id: str
    agent_a: str
    agent_b: str
    exact: bool
    item_a: str
    item_b: str
    verdict_ab: str | None
    verdict_ba: str | None
    winner: str | None
    consistent: bool | None
    dimensions: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    ok: bool = True
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mapped(verdict: str, first: str, second: str) -> str:
    return first if verdict == "A" else second if verdict == "B" else "tie"


def resolve_pair(pair_id: str, agent_a: str, agent_b: str, v_ab: str, v_ba: str) -> tuple[str, bool]:
    """Winner agent (or ``"tie"``) from the verdicts in both orders, and whether they agree."""
    w1, w2 = _mapped(v_ab, agent_a, agent_b), _mapped(v_ba, agent_b, agent_a)
    return (w1 if w1 == w2 else "tie"), w1 == w2


def position_bias_report(outcomes: Sequence[PairwiseOutcome]) -> dict[str, Any]:
    """How much the shown order decided the verdicts.

    ``first_position_share``: share of non-tie verdicts (both orders pooled) that chose the
    reply shown first (0.5 = no bias), with a two-sided binomial test against 0.5;
    ``consistency``: share of pairs whose winner survived swapping the order;
    ``first_wins_both``/``second_wins_both``: pairs where the first-shown (or second-shown)
    reply won in both orders, i.e. the order, not the reply, decided.
    """
    from scipy.stats import binomtest

    verdicts = [v for o in outcomes if o.ok for v in (o.verdict_ab, o.verdict_ba) if v in ("A", "B")]
    ok = [o for o in outcomes if o.ok]
    first = sum(1 for v in verdicts if v == "A")
    out: dict[str, Any] = {
        "n_pairs": len(outcomes),
        "n_ok": len(ok),
        "n_nontie_verdicts": len(verdicts),
        "first_position_share": round(first / len(verdicts), 4) if verdicts else None,
        "binomial_p": float(binomtest(first, len(verdicts), 0.5).pvalue) if verdicts else None,
        "consistency": round(sum(1 for o in ok if o.consistent) / len(ok), 4) if ok else None,
        "first_wins_both": sum(1 for o in ok if o.verdict_ab == "A" and o.verdict_ba == "A"),
        "second_wins_both": sum(1 for o in ok if o.verdict_ab == "B" and o.verdict_ba == "B"),
    }
    return out


def win_table(outcomes: Sequence[PairwiseOutcome]) -> dict[str, dict[str, Any]]:
    """Per agent pair ``"a vs b"``: wins of each, ties (incl. order-inconsistent), failures."""
    table: dict[str, dict[str, Any]] = {}
    for o in outcomes:
        key = f"{o.agent_a} vs {o.agent_b}"
        row = table.setdefault(key, {o.agent_a: 0, o.agent_b: 0, "tie": 0, "inconsistent": 0, "failed": 0, "n": 0})
        row["n"] += 1
        if not o.ok:
            row["failed"] += 1
            continue
        row[o.winner or "tie"] += 1
        if not o.consistent:
            row["inconsistent"] += 1
    for row in table.values():
        decided = row["n"] - row["failed"]
        for k in list(row):
            if k not in ("tie", "inconsistent", "failed", "n"):
                row[f"{k}_win_rate"] = round(row[k] / decided, 4) if decided else None
    return table


class LLMJudge:
    """Absolute and pairwise judging through an async LLM client.

    >>> judge = LLMJudge(client, JudgeSettings(batch_size=16, anchors_per_batch=2))
    >>> result = await judge.judge_items(items)          # AbsoluteResult
    >>> outcomes = await judge.compare_many(pairs)       # list[PairwiseOutcome]

    ``model`` is only recorded (the client decides which model answers).
    """

    scorer = LLM_SCORER

    def __init__(
        self,
        client: LLMClientLike,
        settings: JudgeSettings | None = None,
        *,
        anchors: Sequence[Anchor] = ANCHORS,
        model: str = "",
        on_batch: Callable[[BatchReport], None] | None = None,
    ):
        self.client = client
        self.settings = settings or JudgeSettings()
        self.anchors = interleave_by_quality(anchors)
        self.model = model
        self.on_batch = on_batch

    # ---------------------------------------------------------------------- absolute
    async def judge_one(self, item: JudgeItem, *, seed: int | None = None) -> Judgement:
        """One sample of an absolute judgement; failures come back as ``ok=False``."""
        try:
            res = await self.client.complete_json(
                absolute_messages(item), ABSOLUTE_SCHEMA, name=ABSOLUTE_NAME, seed=seed, tag=ABSOLUTE_TAG
            )
        except Exception as e:  # a client bug or a transport error must not sink the run
            return Judgement(item.item_id, self.scorer, ok=False, error=f"{type(e).__name__}: {e}")
        if not getattr(res, "ok", False):
            return Judgement(item.item_id, self.scorer, ok=False, error=str(getattr(res, "error", "failed")))
        try:
            return parse_absolute(item, res.data, scorer=self.scorer)
        except JudgeOutputError as e:
            return Judgement(item.item_id, self.scorer, ok=False, error=str(e))

    async def score(self, items: Sequence[JudgeItem]) -> list[Judgement]:
        """Averaged judgements of ``items`` (anchors and repeats applied)."""
        return (await self.judge_items(items)).judgements

    async def judge_items(
        self, items: Sequence[JudgeItem], *, progress: Callable[[int], None] | None = None
    ) -> AbsoluteResult:
        """Judge every item, with anchors in each batch and repeats of the most variable.

        ``progress(n)`` is called as calls complete (for a progress bar).
        """
        st = self.settings
        samples: dict[str, list[Judgement]] = {i.item_id: [] for i in items}
        anchor_js: list[Judgement] = []
        reports: list[BatchReport] = []
        batch_of: dict[str, int] = {}

        first = await self._run_pass(items, 1, st.seed, progress)
        for j in first[0]:
            samples[j.item_id].append(j)
        anchor_js.extend(first[1])
        reports.extend(first[2])
        batch_of.update(first[3])

        repeats_report: dict[str, Any] = {"repeats": st.repeats, "repeat_items": st.repeat_items, "repeated": []}
        if st.repeats > 0 and items:
            probe = await self._run_pass(items, 2, st.seed + 1, progress)
            for j in probe[0]:
                samples[j.item_id].append(j)
            anchor_js.extend(probe[1])
            reports.extend(probe[2])
            spread = {iid: _spread(js) for iid, js in samples.items()}
            ranked = sorted((s, iid) for iid, s in spread.items() if s is not None and s > 0)
            chosen = [iid for _, iid in reversed(ranked)][: st.repeat_items]
            by_id = {i.item_id: i for i in items}
            before = {iid: spread[iid] for iid in chosen}
            for k in range(st.repeats):
                extra = await self._run_pass([by_id[i] for i in chosen], 3 + k, st.seed + 2 + k, progress)
                for j in extra[0]:
                    samples[j.item_id].append(j)
                anchor_js.extend(extra[1])
                reports.extend(extra[2])
            spreads = [s for s in spread.values() if s is not None]
            repeats_report.update(
                probe_mean_abs_delta=round(sum(spreads) / len(spreads), 4) if spreads else None,
                repeated=[{"item_id": iid, "probe_abs_delta": round(before[iid], 4)} for iid in chosen],
            )
        judgements = [average_judgements(i.item_id, self.scorer, samples[i.item_id]) for i in items]
        return AbsoluteResult(judgements, anchor_js, reports, batch_of, repeats_report)

    async def _run_pass(
        self, items: Sequence[JudgeItem], pass_no: int, seed: int, progress: Callable[[int], None] | None
    ) -> tuple[list[Judgement], list[Judgement], list[BatchReport], dict[str, int]]:
        st = self.settings
        rng = random.Random(seed * 1009 + pass_no)
        batches = [list(items[i : i + st.batch_size]) for i in range(0, len(items), st.batch_size)]
        plans: list[list[tuple[JudgeItem, Anchor | None]]] = []
        cursor = (pass_no - 1) * max(1, st.anchors_per_batch)
        for b, batch in enumerate(batches):
            plan: list[tuple[JudgeItem, Anchor | None]] = [(it, None) for it in batch]
            for _ in range(min(st.anchors_per_batch, len(self.anchors)) if self.anchors else 0):
                anchor = self.anchors[cursor % len(self.anchors)]
                cursor += 1
                # a unique id per use, so caches and logs keep them apart
                copy = _with_id(anchor.item, f"{anchor.item.item_id}@p{pass_no}b{b}")
                plan.insert(rng.randint(0, len(plan)), (copy, anchor))
            plans.append(plan)

        async def run(it: JudgeItem) -> Judgement:
            j = await self.judge_one(it, seed=seed)
            if progress is not None:
                progress(1)
            return j

        # All batches are issued at once (the client bounds concurrency and keeps the server
        # busy); tasks start in batch order, so a batch's anchors share its time window.
        flat = [(b, it, anchor) for b, plan in enumerate(plans) for it, anchor in plan]
        results = await asyncio.gather(*(run(it) for _, it, _ in flat))
        item_js: list[Judgement] = []
        anchor_js: list[Judgement] = []
        checks: dict[int, list[AnchorCheck]] = {b: [] for b in range(len(plans))}
        batch_of: dict[str, int] = {}
        for (b, it, anchor), j in zip(flat, results):
            if anchor is None:
                item_js.append(j)
                batch_of[it.item_id] = b
            else:
                anchor_js.append(j)
                checks[b].append(check_anchor(anchor, j))
        reports = []
        for b, plan in enumerate(plans):
            rep = batch_report(pass_no, b, sum(1 for _, a in plan if a is None), checks[b], st.anchor_tolerance)
            reports.append(rep)
            if self.on_batch is not None:
                self.on_batch(rep)
        return item_js, anchor_js, reports, batch_of

    # ---------------------------------------------------------------------- pairwise
    async def _ask_pair(self, first: JudgeItem, second: JudgeItem, exact: bool, seed: int) -> dict[str, Any]:
        res = await self.client.complete_json(
            pairwise_messages(first, second, exact=exact), PAIRWISE_SCHEMA, name=PAIRWISE_NAME, seed=seed,
            tag=PAIRWISE_TAG,
        )
        if not getattr(res, "ok", False):
            raise JudgeOutputError(str(getattr(res, "error", "failed")))
        _validate(res.data, PAIRWISE_SCHEMA)
        return res.data  # type: ignore[return-value]

    async def compare(self, pair: PairMoment) -> PairwiseOutcome:
        """Ask one pair in both orders and resolve the winner."""
        base = PairwiseOutcome(
            pair.pair_id, pair.agent_a, pair.agent_b, pair.exact, pair.a.item_id, pair.b.item_id,
            None, None, None, None,
        )
        try:
            ab, ba = await asyncio.gather(
                self._ask_pair(pair.a, pair.b, pair.exact, self.settings.seed),
                self._ask_pair(pair.b, pair.a, pair.exact, self.settings.seed),
            )
        except Exception as e:
            base.ok, base.error = False, f"{type(e).__name__}: {e}"
            return base
        base.verdict_ab, base.verdict_ba = ab["winner"], ba["winner"]
        base.winner, base.consistent = resolve_pair(pair.pair_id, pair.agent_a, pair.agent_b, ab["winner"], ba["winner"])
        base.dimensions = {
            d: resolve_pair(pair.pair_id, pair.agent_a, pair.agent_b, ab["dimensions"][d], ba["dimensions"][d])[0]
            for d in DIMENSIONS
        }
        base.reasons = {"ab": ab["reason"], "ba": ba["reason"]}
        return base

    async def compare_many(self, pairs: Iterable[PairMoment]) -> list[PairwiseOutcome]:
        return list(await asyncio.gather(*(self.compare(p) for p in pairs)))


def interleave_by_quality(anchors: Sequence[Anchor]) -> list[Anchor]:
    """Anchors ordered worst, best, second worst, second best, …

    Anchors are handed out to batches in this order, so with two or more per batch every
    batch holds one from each end of the scale. That matters: scores are clipped to 0-4, so
    a judge drifting lenient cannot show it on an anchor that should score 4, nor a harsh
    one on an anchor that should score 0.
    """
    ranked = sorted(anchors, key=lambda a: (a.expected.overall or 0.0, a.item.item_id))
    out: list[Anchor] = []
    lo, hi = 0, len(ranked) - 1
    while lo <= hi:
        out.append(ranked[lo])
        if hi != lo:
            out.append(ranked[hi])
        lo, hi = lo + 1, hi - 1
    return out


def _with_id(item: JudgeItem, item_id: str) -> JudgeItem:
    from dataclasses import replace

    return replace(item, item_id=item_id, meta=dict(item.meta))


def _spread(js: Sequence[Judgement]) -> float | None:
    """Disagreement between an item's samples: |Δ overall| plus a small share of the per-
    dimension |Δ| (to break ties between items with equal overall deltas)."""
    ok = [j for j in js if j.ok]
    if len(ok) < 2:
        return None
    overall = [j.overall or 0.0 for j in ok]
    per_dim = sum(max(j.dimensions[d].score for j in ok) - min(j.dimensions[d].score for j in ok) for d in DIMENSIONS)
    return (max(overall) - min(overall)) + 0.01 * per_dim


# convenience for tests and the app: an awaitable scorer signature
AsyncScorer = Callable[[Sequence[JudgeItem]], Awaitable[list[Judgement]]]

_RESPONSE_RX = re.compile(r"<response>\n(.*?)\n</response>", re.S)


def response_in(messages: Sequence[dict[str, str]]) -> str | None:
    """The reply text embedded in an absolute-judgement prompt (fake clients use this)."""
    m = _RESPONSE_RX.search(messages[-1]["content"])
    return m.group(1) if m else None
