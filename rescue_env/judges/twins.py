"""Perturbed twins: the same moment with the trigger swapped, to expose template answers.

For a moment (a :class:`~rescue_env.judges.items.JudgeItem`) two twins are made by
rewriting the client turn the therapist answers (the *trigger*):

- **event twin**: the same feeling, a different triggering event;
- **emotion twin**: the same event, a different feeling.

The agent answers each twin (a :data:`Responder`), the judge scores the three replies, and the
report gives, per agent, the **score gap** between the original reply and each twin reply and
the **similarity** of the replies (TF-IDF cosine). A reply that stays the same when the event
changes does not depend on what happened (a template); one that stays the same when the
feeling changes does not track feelings.

Generators: :class:`TemplateTwinGenerator` (offline, from banks of events and feelings
written for this project) and :class:`LLMTwinGenerator` (asks the LLM to rewrite the turn).
Responders: :class:`RecordedResponder` replays the agent's recorded reply, which is exactly
what a state-driven agent (one that reads distress and stance, not words) would say when
only the words change — so for those agents the event twin's similarity is 1 by
construction, and the score gap shows what that costs; :class:`LLMResponder` lets the
configured LLM answer as the therapist (for LLM therapists). Any ``async (JudgeItem) -> str``
works as a responder.
"""

from __future__ import annotations

import asyncio
import random
import re
from dataclasses import dataclass, replace
from statistics import mean
from typing import Any, Awaitable, Callable, Protocol, Sequence

from rescue_env.judges.items import JudgeItem, Turn
from rescue_env.judges.rubric import Judgement

#: Feelings: key -> (first-person sentence, annotation-style description, cue words).
EMOTIONS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "hurt": ("And honestly, I just feel really hurt.", "feels hurt", ("hurt", "wounded", "betray")),
    "lonely": ("I feel so alone in all of this.", "feels lonely and alone", ("alone", "lonely", "isolat", "on my own")),
    "exhausted": ("I'm completely worn out.", "feels exhausted", ("exhaust", "tired", "worn", "drained")),
    "angry": ("I'm so angry I can barely sit here.", "feels angry", ("angry", "anger", "furious", "resent", "rage", "irritat", "frustrat")),
    "scared": ("I'm scared about where this is going.", "feels scared and anxious", ("scared", "afraid", "fear", "anxious", "worried", "panic", "braced")),
    "ashamed": ("Honestly, I feel ashamed.", "feels ashamed", ("ashamed", "shame", "embarrass", "humiliat", "guilt")),
    "hopeless": ("It feels like nothing is ever going to change.", "feels hopeless", ("hopeless", "helpless", "pointless", "despair", "resign", "stuck", "trapped")),
    "unappreciated": ("It's like nothing I do counts for anything.", "feels unappreciated", ("unappreciat", "invisible", "unseen", "dismiss", "taken for granted", "criticis", "defensive")),
}
#: For the emotion twin: a feeling far from the original one.
CONTRAST: dict[str, str] = {
    "hurt": "scared", "lonely": "angry", "exhausted": "ashamed", "angry": "lonely", "scared": "angry",
    "ashamed": "angry", "hopeless": "angry", "unappreciated": "scared",
}
#: Events per scenario; ``{other}`` is another member of the session.
EVENTS: dict[str, tuple[str, ...]] = {
    "couple": (
        "{other} made plans for the whole weekend without asking me.",
        "{other} forgot my birthday dinner and came home after midnight.",
        "{other} told our friends about our money problems at a party.",
        "{other} went through my phone while I was asleep.",
        "{other} said in front of the kids that I'm never home.",
        "{other} booked a holiday with their brother and told me afterwards.",
    ),
    "family": (
        "{other} read my messages and grounded me for a month.",
        "{other} cancelled the trip because of one bad report card.",
        "{other} took my sister's side again at dinner, in front of everyone.",
        "{other} told my teachers about our problems at home without asking me.",
        "{other} moved my things out of my room for the new baby.",
        "{other} missed my final match to go to a work thing.",
    ),
}

_FEELING_SENTENCE = re.compile(
    r"\b(feel|feels|felt|feeling|i'm so|i am so|angry|hurt|scared|afraid|alone|lonely|tired|exhausted|ashamed|"
    r"furious|hopeless|sad|upset|worried|anxious)\b",
    re.I,
)


def emotion_key(description: str) -> str:
    """The bank feeling closest to an annotated description (``"hurt"`` when nothing matches)."""
    low = description.lower()
    best, hits = "hurt", 0
    for key, (_, _, cues) in EMOTIONS.items():
        n = sum(1 for c in cues if c in low)
        if n > hits:
            best, hits = key, n
    return best


@dataclass(slots=True)
class TwinSet:
    """An original moment and its two twins (responses still the original agent's)."""

    base: JudgeItem
    event: JudgeItem
    emotion: JudgeItem


class TwinGenerator(Protocol):
    async def generate(self, item: JudgeItem) -> TwinSet | None: ...


def _twin(item: JudgeItem, role: str, text: str, feeling: str, note: str) -> JudgeItem:
    assert item.trigger is not None
    trig = Turn(item.trigger.speaker, item.trigger.target, text)
    context = list(item.context)
    for k in range(len(context) - 1, -1, -1):
        if context[k] == item.trigger:
            context[k] = trig
            break
    feelings = dict(item.feelings)
    feelings[item.trigger.speaker] = feeling
    return replace(
        item,
        item_id=f"{item.item_id}~{role}",
        context=context,
        trigger=trig,
        trigger_emotion=feeling,
        feelings=feelings,
        kind="twin",
        meta={**item.meta, "twin": role, "twin_of": item.item_id, "perturbation": note,
              "recorded_response": item.response},
    )


class TemplateTwinGenerator:
    """Offline twins from the event and feeling banks (deterministic given ``seed``).

    Event twin: a bank event about another member plus a sentence voicing the original
    feeling. Emotion twin: the original turn with its feeling sentences removed (the event
    is kept) plus a sentence voicing a contrasting feeling.
    """

    def __init__(self, seed: int = 0):
        self.seed = seed

    async def generate(self, item: JudgeItem) -> TwinSet | None:
        if item.trigger is None:
            return None
        rng = random.Random(f"{self.seed}|{item.item_id}")
        speaker = item.trigger.speaker
        others = [m for m in item.members if m != speaker] or [speaker]
        other = rng.choice(others)
        key = emotion_key(item.trigger_emotion or item.feelings.get(speaker, "") or item.trigger.text)
        sentence, description, _ = EMOTIONS[key]
        event = rng.choice(EVENTS.get(item.scenario, EVENTS["couple"])).format(other=other)
        event_twin = _twin(item, "event", f"{event} {sentence}", item.trigger_emotion or description,
                           f"event swapped, feeling kept ({key})")
        key2 = CONTRAST[key]
        sentences = re.split(r"(?<=[.!?])\s+", item.trigger.text.strip())
        kept = [s for s in sentences if not _FEELING_SENTENCE.search(s)] or sentences[:1]
        emo_text = f"{' '.join(kept)} {EMOTIONS[key2][0]}"
        emotion_twin = _twin(item, "emotion", emo_text, EMOTIONS[key2][1], f"feeling swapped {key}→{key2}, event kept")
        return TwinSet(item, event_twin, emotion_twin)


TWIN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "event_twin": {"type": "string"},
        "emotion_twin": {"type": "string"},
        "new_emotion": {"type": "string"},
    },
    "required": ["event_twin", "emotion_twin", "new_emotion"],
    "additionalProperties": False,
}
TWIN_NAME = "perturbed_twins"

_TWIN_SYSTEM = """You write controlled variations of one client turn from a therapy session, for testing.
Return JSON with:
- event_twin: the same speaker, the same feeling at the same strength, but a different triggering event of
  similar weight (not a paraphrase of the original event). Keep the length and the voice.
- emotion_twin: the same event in the same words where possible, but the speaker now feels a clearly
  different feeling (name it in new_emotion). Keep the length and the voice.
- new_emotion: a short annotation of the new feeling, e.g. "feels ashamed"."""


class LLMTwinGenerator:
    """Twins written by the LLM (one call per moment); falls back to ``None`` on failure."""

    def __init__(self, client: Any, *, seed: int = 0):
        self.client = client
        self.seed = seed
        self.failures: list[str] = []

    async def generate(self, item: JudgeItem) -> TwinSet | None:
        if item.trigger is None:
            return None
        feeling = item.trigger_emotion or item.feelings.get(item.trigger.speaker, "") or "(not annotated)"
        user = (
            f"Session: {item.scenario} therapy. Speaker: {item.trigger.speaker}. Their feeling: {feeling}.\n"
            f"<turn>\n{item.trigger.text}\n</turn>"
        )
        try:
            res = await self.client.complete_json(
                [{"role": "system", "content": _TWIN_SYSTEM}, {"role": "user", "content": user}],
                TWIN_SCHEMA, name=TWIN_NAME, seed=self.seed, tag="judge:twins",
            )
        except Exception as e:
            self.failures.append(f"{item.item_id}: {type(e).__name__}: {e}")
            return None
        data = getattr(res, "data", None) if getattr(res, "ok", False) else None
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) and data[k].strip() for k in TWIN_SCHEMA["required"]):
            self.failures.append(f"{item.item_id}: {getattr(res, 'error', None) or 'bad twin output'}")
            return None
        return TwinSet(
            item,
            _twin(item, "event", data["event_twin"].strip(), feeling, "event swapped by LLM, feeling kept"),
            _twin(item, "emotion", data["emotion_twin"].strip(), data["new_emotion"].strip(),
                  f"feeling swapped by LLM to {data['new_emotion'].strip()!r}"),
        )


Responder = Callable[[JudgeItem], Awaitable[str]]


class RecordedResponder:
    """Replays the agent's recorded reply (see the module doc for when that is exact)."""

    name = "recorded"

    async def __call__(self, item: JudgeItem) -> str:
        return str(item.meta.get("recorded_response", item.response))


RESPONDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"utterance": {"type": "string"}},
    "required": ["utterance"],
    "additionalProperties": False,
}
RESPONDER_NAME = "therapist_reply"


class LLMResponder:
    """The configured LLM answers the moment as the therapist (one or two sentences)."""

    name = "llm"

    def __init__(self, client: Any, *, seed: int = 0):
        self.client = client
        self.seed = seed

    async def __call__(self, item: JudgeItem) -> str:
        from rescue_env.judges.llm_judge import render_moment

        system = (
            "You are the therapist in a couple or family therapy session. Reply to the latest client turn in one "
            'to three sentences, addressed as stated. Return JSON {"utterance": ...}.'
        )
        res = await self.client.complete_json(
            [{"role": "system", "content": system}, {"role": "user", "content": render_moment(item)}],
            RESPONDER_SCHEMA, name=RESPONDER_NAME, seed=self.seed, tag="judge:responder",
        )
        if not getattr(res, "ok", False) or not isinstance(getattr(res, "data", None), dict):
            raise RuntimeError(f"responder failed: {getattr(res, 'error', 'no data')}")
        return str(res.data.get("utterance", "")).strip()


def reply_similarity(pairs: Sequence[tuple[str, str]]) -> list[float]:
    """TF-IDF cosine similarity (word 1-2-grams, fitted on every reply given) per pair.

    1.0 = the same words; identical replies give exactly 1.0.
    """
    if not pairs:
        return []
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.metrics.pairwise import cosine_similarity

    texts = [t for p in pairs for t in p]
    try:
        vec = TfidfVectorizer(ngram_range=(1, 2), lowercase=True).fit(texts)
    except ValueError:  # every text empty or stop words only
        return [1.0 if a == b else 0.0 for a, b in pairs]
    out = []
    for a, b in pairs:
        if a == b:
            out.append(1.0)
            continue
        m = vec.transform([a, b])
        out.append(float(cosine_similarity(m[0], m[1])[0, 0]))
    return out


@dataclass(slots=True)
class TwinRecord:
    """One moment's twin test."""

    item_id: str
    agent: str
    role: str  # "event" or "emotion"
    perturbation: str
    trigger: str
    twin_trigger: str
    reply: str
    twin_reply: str
    score: float | None
    twin_score: float | None
    gap: float | None
    similarity: float | None
    template_like: bool | None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


async def run_twins(
    items: Sequence[JudgeItem],
    generator: TwinGenerator,
    responder: Responder,
    score: Callable[[Sequence[JudgeItem]], Awaitable[list[Judgement]]],
    *,
    template_threshold: float = 0.9,
) -> tuple[list[TwinRecord], dict[str, Any]]:
    """Make twins of ``items``, get the agent's replies, score all, and report.

    The responder answers the original moment too (``reply``) and each twin (``twin_reply``).
    Returns one :class:`TwinRecord` per (moment, twin role) and a summary per agent and role:
    mean |score gap|, mean signed gap (original − twin), mean similarity and the share of
    template-like replies (similarity ≥ ``template_threshold``).
    """
    sets = [s for s in await asyncio.gather(*(generator.generate(i) for i in items)) if s is not None]

    async def answer(it: JudgeItem) -> tuple[JudgeItem, str | None]:
        try:
            return replace(it, response=await responder(it)), None
        except Exception as e:  # a failing responder loses one twin, not the run
            return replace(it, response=""), f"{type(e).__name__}: {e}"

    # The original moment is answered by the same responder, so base and twin replies are
    # comparable (the recorded responder gives back the agent's own reply).
    answered = await asyncio.gather(*(answer(it) for s in sets for it in (s.base, s.event, s.emotion)))
    ok_items = [it for it, err in answered if err is None]
    judged = await score(ok_items)
    by_id = {j.item_id: j for j in judged}
    triples = [answered[k : k + 3] for k in range(0, len(answered), 3)]
    pairs = [(base.response, tw.response) for (base, _), *twins in triples for tw, _ in twins]
    sims = iter(reply_similarity(pairs))
    records: list[TwinRecord] = []
    for (base, base_err), *twins in triples:
        for tw, tw_err in twins:
            sim = next(sims)
            err = base_err or tw_err
            base_j, twin_j = by_id.get(base.item_id), by_id.get(tw.item_id)
            bs = base_j.overall if base_j else None
            ts = twin_j.overall if twin_j else None
            records.append(
                TwinRecord(
                    item_id=base.item_id,
                    agent=base.agent,
                    role=tw.meta["twin"],
                    perturbation=tw.meta["perturbation"],
                    trigger=base.trigger.text if base.trigger else "",
                    twin_trigger=tw.trigger.text if tw.trigger else "",
                    reply=base.response,
                    twin_reply=tw.response,
                    score=bs,
                    twin_score=ts,
                    gap=None if bs is None or ts is None else round(bs - ts, 4),
                    similarity=None if err else round(sim, 4),
                    template_like=None if err else sim >= template_threshold,
                    error=err,
                )
            )
    return records, summarise_twins(records)


def summarise_twins(records: Sequence[TwinRecord]) -> dict[str, Any]:
    """Per agent and twin role: n, mean |gap|, mean gap, mean similarity, template share."""
    out: dict[str, Any] = {}
    for agent in sorted({r.agent for r in records}):
        out[agent] = {}
        for role in ("event", "emotion"):
            rs = [r for r in records if r.agent == agent and r.role == role]
            gaps = [r.gap for r in rs if r.gap is not None]
            sims = [r.similarity for r in rs if r.similarity is not None]
            tmpl = [r.template_like for r in rs if r.template_like is not None]
            out[agent][role] = {
                "n": len(rs),
                "mean_abs_gap": round(mean(abs(g) for g in gaps), 4) if gaps else None,
                "mean_gap": round(mean(gaps), 4) if gaps else None,
                "mean_similarity": round(mean(sims), 4) if sims else None,
                "template_share": round(sum(tmpl) / len(tmpl), 4) if tmpl else None,
                "failed": sum(1 for r in rs if r.error),
            }
    return out
