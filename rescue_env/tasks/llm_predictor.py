"""LLM predictor and LLM judges for the six tasks, over a small async JSON interface.

Both talk to any object with

    async complete_json(messages, schema, *, name, seed=None, tag=None) -> result

where ``result.ok`` says whether a JSON object came back, ``result.data`` is that object
(``dict`` or ``None``) and ``result.error`` a message. ``rescue_env.llm.LLMClient`` provides
it (retries, timeouts, caching and concurrency limits live there); tests pass a fake.

How requests are built:

- several instances of one sample per request (``batch_size``), each under an opaque id
  ``i0 … iN`` that is local to the request, so ids carry no hint of the gold label, and
  records carry only the transcript (speaker, target, text, background remarks), never
  annotations, candidate types or boundary types;
- the reply follows a JSON Schema (``strict``-compatible: every property required, no extra
  properties; labels as enums);
- an item missing from the reply or with an unusable value is asked again alone, once; then
  it is a failure (scored wrong and counted, never dropped, never given the gold label). A
  request that fails (``ok`` false or an exception) fails its items.

Judges grade ER and VP with the rubric scales of ``docs/PROTOCOL.md`` (ER emotion 1-5;
VP source/target 0-2 and viewpoint 0-4, whose sum is recomputed, the judge's own total kept
beside it).
"""

from __future__ import annotations

import json
from typing import Any, Protocol, Sequence, runtime_checkable

from rescue_env.data.schema import Dialogue, Row
from rescue_env.tasks.instances import (
    CONTEXT_SIZE,
    GENERATIVE_TASKS,
    Instance,
    check_task,
    clean,
    round_intensity,
)
from rescue_env.tasks.predictors import Prediction
from rescue_env.tasks.scorers import Grade
from rescue_env.taxonomy.labels import label_info


@runtime_checkable
class JSONResult(Protocol):
    """What ``complete_json`` returns."""

    ok: bool
    data: dict | None
    error: str | None


@runtime_checkable
class JSONClient(Protocol):
    """The part of ``rescue_env.llm.LLMClient`` this module uses."""

    async def complete_json(
        self, messages: list[dict[str, str]], schema: dict[str, Any], *, name: str, seed: int | None = None, tag: str | None = None
    ) -> JSONResult: ...


SYSTEM_PROMPT = (
    "You are an experienced couple and family therapist helping to evaluate therapy transcripts. "
    "Transcripts are excerpts of real sessions; speakers are the therapist and the clients. "
    "Answer every item, and reply with a single JSON object that follows the given schema."
)

YES = frozenset({"yes", "y", "true", "1", "speak", "should_speak"})
NO = frozenset({"no", "n", "false", "0", "listen", "keep_listening", "do_not_speak"})


# ---------------------------------------------------------------------------------------------
# records


def _time(row: Row) -> str:
    if row.start_time is None or row.end_time is None:
        return ""
    return f"{row.start_time:.3f}-{row.end_time:.3f}"


def row_record(row: Row) -> dict[str, Any]:
    """A row as shown to a model: transcript fields only (no annotation of any kind)."""
    rec: dict[str, Any] = {
        "row": row.row_index,
        "time": _time(row),
        "speaker": row.primary_speaker,
        "target": [t for t in (clean(x) for x in row.target) if t],
        "text": row.dialogue_cleaned,
    }
    background = [
        {"speaker": b.speaker, "target": list(b.target), "content": b.content}
        for b in row.background_dialogue
        if clean(b.speaker) and b.target and clean(b.content)
    ]
    if background:
        rec["background"] = background
    return rec


def _context(inst: Instance, k: int) -> list[dict[str, Any]]:
    return [row_record(r) for r in inst.prior_rows(k)]


def item_record(inst: Instance, item_id: str, context_size: dict[str, int]) -> dict[str, Any]:
    """The record of one instance under ``item_id``: what the predictor sees, nothing else."""
    task = inst.task
    k = context_size.get(task, CONTEXT_SIZE[task])
    rec: dict[str, Any] = {"id": item_id, "participants": list(inst.context.get("participants", []))}
    if task == "itp":
        # ITP's prior rows end with the decision row. `paper` shows it once, as the latest
        # row after k rows of context; `released` repeats it at the end of its k-row context.
        if inst.profile == "released":
            rec["prior_context"] = _context(inst, k)
        else:
            rows = inst.prior_rows(k + 1) if k > 0 else []
            rec["prior_context"] = [row_record(r) for r in rows[:-1]]
        rec["latest_row"] = row_record(inst.current_row)  # type: ignore[arg-type]
    elif task == "rpp":
        rec["speaker_of_the_row"] = inst.context.get("speaker", "")
        rec["prior_context"] = _context(inst, k)
    elif task == "stp":
        rec["candidate_targets"] = list(dict.fromkeys(c for c in inst.candidates if c and c != "__empty__"))
        rec["prior_context"] = _context(inst, k)
    elif task == "ssp":
        rec["known_support_target"] = inst.context.get("known_target", "")
        rec["prior_context"] = _context(inst, k)
    else:  # er, vp: the client's row itself is shown
        rec["speaker"] = inst.context.get("speaker", "")
        rec["prior_context"] = _context(inst, k)
        rec["current_row"] = row_record(inst.current_row)  # type: ignore[arg-type]
    return rec


def _labels_block(scenario: str, kind: str) -> str:
    lines = []
    for info in label_info(scenario, kind):  # type: ignore[arg-type]
        lines.append(f"- {info.name}: {info.definition} Use when: {info.use_when} Not when: {info.not_when}")
    return "\n".join(lines)


def _strict(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def _reply_schema(key: str, ids: list[str], fields: dict[str, Any]) -> dict[str, Any]:
    item = _strict({"id": {"type": "string", "enum": ids}, **fields})
    # One answer per item: a grammar (llama.cpp) or strict decoding then cannot stop short
    # (SmolLM2 answered 4 of 8 ITP items with an empty list), the reply budget is sized to
    # the batch, and a server without either still has its short reply asked again.
    return _strict({key: {"type": "array", "items": item, "minItems": len(ids), "maxItems": len(ids)}})


# ---------------------------------------------------------------------------------------------
# task prompts


def task_prompt(task: str, scenario: str, items: list[dict], labels: Sequence[str]) -> tuple[str, dict[str, Any]]:
    """``(user message, answer fields)`` for a batch of one scenario: the message states the
    task (with label definitions for RPP and SSP) and lists the items; the fields are the
    JSON Schema of one answer, to which the caller adds the item id."""
    group = "couple" if scenario == "couple" else "family"
    body = json.dumps(items, ensure_ascii=False, indent=1)
    if task == "itp":
        text = (
            f"Task: intervention timing in {group} therapy. For each item, decide whether the therapist should "
            "speak right after its latest_row (\"yes\") or keep listening and let the clients go on (\"no\"). "
            "prior_context holds the rows just before the latest row.\n"
            "Give should_speak and your confidence (0-1) for every item."
        )
        fields = {"should_speak": {"type": "string", "enum": ["yes", "no"]}, "confidence": {"type": "number"}}
    elif task == "rpp":
        text = (
            f"Task: relation pattern in {group} therapy. For each item, read prior_context (every row before the "
            "asked row) and rank the three relation patterns most likely to describe the interaction at the next "
            "row (spoken by speaker_of_the_row), most likely first. Labels:\n" + _labels_block(scenario, "pattern") +
            "\nGive relation_top3: three distinct labels."
        )
        fields = {"relation_top3": {"type": "array", "items": {"type": "string", "enum": list(labels)}}}
    elif task == "stp":
        text = (
            f"Task: support target in {group} therapy. The therapist speaks next. For each item, read prior_context "
            "and rank the three candidate_targets the therapist most likely addresses, most likely first "
            f"(a name, two names joined by ' & ', or '{ 'Couple' if scenario == 'couple' else 'Family' }' for everyone).\n"
            "Give target_top3: up to three distinct values from that item's candidate_targets."
        )
        fields = {"target_top3": {"type": "array", "items": {"type": "string", "enum": list(labels)}}}
    elif task == "ssp":
        text = (
            f"Task: support strategy in {group} therapy. The therapist speaks next, to known_support_target. For each "
            "item, read prior_context and rank the three strategies the therapist most likely uses, most likely "
            "first. Strategies:\n" + _labels_block(scenario, "strategy") + "\nGive strategy_top3: three distinct labels."
        )
        fields = {"strategy_top3": {"type": "array", "items": {"type": "string", "enum": list(labels)}}}
    elif task == "er":
        text = (
            f"Task: emotion recognition in {group} therapy. For each item, infer what the speaker feels inside "
            "while saying current_row (prior_context gives the rows before). Give emotion, a short description "
            "of the feeling (e.g. 'feels hurt and unheard by her partner'), and its intensity as an integer 0-10."
        )
        fields = {"emotion": {"type": "string"}, "intensity": {"type": "integer"}}
    elif task == "vp":
        text = (
            f"Task: viewpoint prediction in {group} therapy. For each item, infer the viewpoints the speaker holds "
            "in current_row about other people (prior_context gives the rows before): for each, the source (the "
            "speaker), the target person and the viewpoint in a short sentence."
        )
        vp_item = _strict({"source": {"type": "string"}, "target": {"type": "string"}, "viewpoint": {"type": "string"}})
        fields = {"viewpoints": {"type": "array", "items": vp_item}}
    else:  # pragma: no cover - check_task ran before
        raise ValueError(task)
    return f"{text}\n\nItems:\n{body}", fields


ANSWER_KEY = {"itp": "should_speak", "rpp": "relation_top3", "stp": "target_top3", "ssp": "strategy_top3", "er": "emotion", "vp": "viewpoints"}


def parse_answer(task: str, item: dict[str, Any], inst: Instance) -> Prediction:
    """One reply item as a :class:`Prediction`; unusable values are failures."""
    if task == "itp":
        v = item.get("should_speak")
        s = ("yes" if v else "no") if isinstance(v, bool) else str(v if v is not None else "").strip().lower()
        if s in YES:
            return Prediction("yes", extra={"confidence": item.get("confidence")})
        if s in NO:
            return Prediction("no", extra={"confidence": item.get("confidence")})
        return Prediction.failure(f"unusable should_speak {v!r}")
    if task in ("rpp", "stp", "ssp"):
        v = item.get(ANSWER_KEY[task])
        if not isinstance(v, list):
            return Prediction.failure(f"{ANSWER_KEY[task]} is not a list: {v!r}"[:200])
        return Prediction([str(x) if x is not None else "" for x in v])
    if task == "er":
        emotion = clean(item.get("emotion"))
        intensity = round_intensity(item.get("intensity"))
        if not emotion:
            return Prediction.failure("empty emotion")
        if intensity is None or not 0 <= intensity <= 10:
            return Prediction.failure(f"intensity {item.get('intensity')!r} is not an integer 0-10")
        return Prediction({"emotion": emotion, "intensity": intensity})
    v = item.get("viewpoints")
    if not isinstance(v, list):
        return Prediction.failure(f"viewpoints is not a list: {v!r}"[:200])
    speaker = inst.context.get("speaker", "")
    out = []
    for x in v:
        if isinstance(x, dict) and clean(x.get("target")) and clean(x.get("viewpoint")):
            out.append({"source": clean(x.get("source")) or speaker, "target": clean(x.get("target")), "viewpoint": clean(x.get("viewpoint"))})
    return Prediction(out)


async def _request(client: JSONClient, user: str, schema: dict, *, name: str, seed: int | None, tag: str) -> tuple[dict | None, str]:
    """``(data, "")`` or ``(None, error)``; exceptions are caught (a run never aborts)."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]
    try:
        result = await client.complete_json(messages, schema, name=name, seed=seed, tag=tag)
    except Exception as exc:
        return None, f"request raised {type(exc).__name__}: {exc}"
    if not getattr(result, "ok", False) or not isinstance(getattr(result, "data", None), dict):
        return None, f"request failed: {getattr(result, 'error', None) or 'no JSON object'}"
    return result.data, ""


def _items_by_id(data: dict, key: str, ids: list[str]) -> dict[str, dict]:
    found: dict[str, dict] = {}
    items = data.get(key)
    if isinstance(items, dict):  # a bare object for a single item
        items = [items]
    if not isinstance(items, list):
        return found
    for it in items:
        if not isinstance(it, dict):
            continue
        iid = str(it.get("id", "")).strip()
        if not iid and len(ids) == 1:  # an id-less answer to a one-item request is that item's
            iid = ids[0]
        if iid in ids and iid not in found:
            found[iid] = it
    return found


# ---------------------------------------------------------------------------------------------
# predictor


class LLMPredictor:
    """Answers all six tasks with an LLM through ``client`` (see the module docstring).

    ``batch_size`` instances of one sample per request; ``seed`` is passed to every request;
    ``context_size`` overrides the rows of context per task (defaults: ITP 3, RPP all prior
    rows, STP/SSP/ER/VP 3); ``retry_single`` asks a missing or unusable item again alone, once.
    """

    def __init__(
        self,
        client: JSONClient,
        *,
        batch_size: int = 4,
        seed: int | None = 0,
        name: str | None = None,
        context_size: dict[str, int] | None = None,
        retry_single: bool = True,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.client = client
        self.batch_size = int(batch_size)
        self.seed = seed
        model = name or getattr(client, "model", None) or getattr(getattr(client, "config", None), "model", None) or "llm"
        self.name = f"llm:{model}"
        self.context_size = {**CONTEXT_SIZE, **(context_size or {})}
        self.retry_single = retry_single

    def supports(self, task: str) -> str | None:
        check_task(task)
        return None

    def prepare(self, task: str, profile: str, dialogues: Sequence[Dialogue]) -> None:
        """Nothing to prepare."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "batch_size": self.batch_size, "seed": self.seed, "context_size": self.context_size}

    def _labels(self, task: str, batch: list[Instance]) -> list[str]:
        labels: list[str] = []
        for inst in batch:
            for c in inst.candidates:
                if c and c != "__empty__" and c not in labels:
                    labels.append(c)
        return labels

    async def _ask(self, task: str, batch: list[Instance]) -> tuple[dict[str, dict], list[str], str]:
        ids = [f"i{j}" for j in range(len(batch))]
        items = [item_record(inst, iid, self.context_size) for inst, iid in zip(batch, ids)]
        user, fields = task_prompt(task, batch[0].scenario, items, self._labels(task, batch))
        schema = _reply_schema("predictions", ids, fields)
        data, err = await _request(self.client, user, schema, name=f"task_{task}", seed=self.seed, tag=f"tasks/{task}/{batch[0].sample_id}")
        if data is None:
            return {}, ids, err
        return _items_by_id(data, "predictions", ids), ids, ""

    async def apredict(self, task: str, batch: list[Instance]) -> list[Prediction]:
        if not batch:
            return []
        found, ids, err = await self._ask(task, batch)
        out: list[Prediction] = []
        for inst, iid in zip(batch, ids):
            if err:
                out.append(Prediction.failure(err))
            elif iid not in found:
                out.append(Prediction.failure("missing from the reply"))
            else:
                out.append(parse_answer(task, found[iid], inst))
        if self.retry_single and not err and len(batch) > 1:
            for j, (inst, pred) in enumerate(zip(batch, out)):
                if not pred.failed:
                    continue
                found1, ids1, err1 = await self._ask(task, [inst])
                if err1:
                    out[j] = Prediction.failure(f"{pred.reason}; retry: {err1}")
                elif ids1[0] not in found1:
                    out[j] = Prediction.failure(f"{pred.reason}; retry: missing from the reply")
                else:
                    retry = parse_answer(task, found1[ids1[0]], inst)
                    if retry.failed:
                        retry.reason = f"{pred.reason}; retry: {retry.reason}"
                    out[j] = retry
        return out


# ---------------------------------------------------------------------------------------------
# judges


ER_RUBRIC = (
    "Grade how well each predicted emotion matches the gold (annotated) emotion of the speaker, as emotion_score "
    "from 1 to 5: 1 = wrong or contradictory, 2 = weakly related, 3 = partially right, 4 = close, 5 = almost "
    "exactly the same. Be lenient about paraphrases and wording. Do not grade intensity. Add a short verdict."
)
VP_RUBRIC = (
    "Grade each predicted list of viewpoints against the gold (annotated) viewpoints of the speaker. "
    "source_target_score 0-2: 0 = the source/target pairings are mostly wrong or missing, 1 = partially "
    "recovered, 2 = all gold pairings essentially recovered. viewpoint_score 0-4: 0 = wrong, 1 = weakly related, "
    "2 = close, 3 = essentially the same, 4 = almost exactly the same content. Be lenient about paraphrases. "
    "total_score = source_target_score + viewpoint_score. Add a short verdict."
)


class LLMJudge:
    """The ER/VP judge through an LLM ``client`` (gold and prediction shown together; ids
    opaque). Grades outside the rubric's range are failures."""

    kind = "llm"

    def __init__(self, client: JSONClient, *, batch_size: int = 5, seed: int | None = 0, name: str | None = None, retry_single: bool = True):
        self.client = client
        self.batch_size = int(batch_size)
        self.seed = seed
        self.name = f"llm-judge:{name or getattr(getattr(client, 'config', None), 'model', None) or 'llm'}"
        self.retry_single = retry_single

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "batch_size": self.batch_size, "seed": self.seed}

    @staticmethod
    def _item(task: str, inst: Instance, value: Any, iid: str) -> dict[str, Any]:
        row = inst.current_row
        base = {"id": iid, "speaker": inst.context.get("speaker", ""), "dialogue": row.dialogue_cleaned if row else ""}
        if task == "er":
            return {**base, "gold_emotion": inst.gold["emotion"], "predicted_emotion": (value or {}).get("emotion", "")}
        return {**base, "gold_viewpoints": inst.gold, "predicted_viewpoints": value or []}

    @staticmethod
    def _parse(task: str, item: dict[str, Any]) -> Grade:
        def num(key: str, lo: int, hi: int) -> float | None:
            v = item.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float, str)):
                return None
            try:
                f = float(v)
            except (TypeError, ValueError):
                return None
            return f if lo <= f <= hi else None

        verdict = str(item.get("verdict", ""))[:300]
        if task == "er":
            s = num("emotion_score", 1, 5)
            if s is None:
                return Grade(failed=True, reason=f"emotion_score {item.get('emotion_score')!r} outside 1-5")
            return Grade({"emotion_score": s}, extra={"verdict": verdict})
        st, vs = num("source_target_score", 0, 2), num("viewpoint_score", 0, 4)
        if st is None or vs is None:
            return Grade(failed=True, reason=f"scores {item.get('source_target_score')!r}/{item.get('viewpoint_score')!r} outside 0-2/0-4")
        total = item.get("total_score")
        scores = {"source_target_score": st, "viewpoint_score": vs}
        if isinstance(total, (int, float)) and not isinstance(total, bool):
            scores["judge_total"] = float(total)
        return Grade(scores, extra={"verdict": verdict})

    async def _ask(self, task: str, instances: list[Instance], values: list[Any]) -> tuple[dict[str, dict], list[str], str]:
        ids = [f"i{j}" for j in range(len(instances))]
        items = [self._item(task, inst, v, iid) for inst, v, iid in zip(instances, values, ids)]
        if task == "er":
            fields = {"emotion_score": {"type": "integer"}, "verdict": {"type": "string"}}
            rubric = ER_RUBRIC
        else:
            fields = {"source_target_score": {"type": "integer"}, "viewpoint_score": {"type": "integer"}, "total_score": {"type": "integer"}, "verdict": {"type": "string"}}
            rubric = VP_RUBRIC
        user = f"{rubric}\n\nItems:\n{json.dumps(items, ensure_ascii=False, indent=1)}"
        data, err = await _request(self.client, user, _reply_schema("grades", ids, fields), name=f"judge_{task}", seed=self.seed, tag=f"tasks/judge/{task}")
        if data is None:
            return {}, ids, err
        return _items_by_id(data, "grades", ids), ids, ""

    async def agrade(self, task: str, instances: list[Instance], values: list[Any]) -> list[Grade]:
        if task not in GENERATIVE_TASKS:
            raise ValueError(f"the judge grades ER and VP only, not {task!r}")
        out: list[Grade] = []
        for start in range(0, len(instances), self.batch_size):
            chunk, vals = instances[start : start + self.batch_size], values[start : start + self.batch_size]
            found, ids, err = await self._ask(task, chunk, vals)
            grades = [Grade(failed=True, reason=f"judge: {err}") if err else (self._parse(task, found[i]) if i in found else Grade(failed=True, reason="judge: missing from the reply")) for i in ids]
            if self.retry_single and not err and len(chunk) > 1:
                for j, g in enumerate(grades):
                    if g.failed:
                        f1, ids1, err1 = await self._ask(task, [chunk[j]], [vals[j]])
                        if not err1 and ids1[0] in f1:
                            grades[j] = self._parse(task, f1[ids1[0]])
            out.extend(grades)
        return out
