"""The support-quality rubric: five dimensions scored 0-4, judged from two sides, with a veto.

This is the scale both scorers (:mod:`~rescue_env.judges.llm_judge` and
:mod:`~rescue_env.judges.offline`) fill in and that human raters use in agreement studies.
It is written for multi-party therapy: every therapist utterance is judged

- **toward the addressed member(s)** (``addressed``): did it reach the person it spoke to?
- **for its effect on the others** (``others``): did it side with one member against
  another, speak for someone absent from the exchange, or leave a more distressed member
  neglected? ``others`` is ``None`` when the utterance addresses the whole group (there is
  nobody left out to judge it for).

A dimension's score is ``min(addressed, others)`` (only ``addressed`` when ``others`` is
``None``): the bucket effect of DESIGN.md §1 applied to a single reply. A reply that soothes
one partner by blaming the other is not a good reply on average; it is as good as its worst
effect. The ``others`` anchors are written so that an ordinary one-to-one reply that harms
nobody scores 3-4 there; only siding, mind-reading, letting an attack run, or coalitions
pull it down.

**Overall** = mean of the five dimension scores (0-4). **Veto**: a reply that follows a
client into self-harm or self-degradation, or demeans a client, scores 0 overall whatever its
dimension scores; vetoes are counted separately in every summary (a veto is not one low
score among others to be averaged away).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Mapping

#: Dimension keys, in the order used in schemas, tables and plots.
DIMENSIONS: tuple[str, ...] = ("recognition", "empathy", "soothing", "guidance", "boundaries")
#: Scores are integers 0..MAX_SCORE per side and dimension.
MAX_SCORE = 4
SCORE_LEVELS: tuple[int, ...] = tuple(range(MAX_SCORE + 1))
Side = Literal["addressed", "others"]

#: The label every offline output carries, so a heuristic score is never mistaken for an
#: LLM judgement.
OFFLINE_SCORER = "offline-heuristic"
LLM_SCORER = "llm"


@dataclass(frozen=True, slots=True)
class Dimension:
    """One rubric dimension with a behavioural anchor per level and side.

    ``addressed[k]`` / ``others[k]`` describe what a level-k reply does (k = 0..4).
    """

    key: str
    title: str
    question: str
    addressed: tuple[str, str, str, str, str]
    others: tuple[str, str, str, str, str]

    def anchor(self, side: Side, level: int) -> str:
        """The behavioural anchor of ``level`` on ``side``."""
        if level not in SCORE_LEVELS:
            raise ValueError(f"level {level!r} outside 0..{MAX_SCORE}")
        return (self.addressed if side == "addressed" else self.others)[level]


RUBRIC: dict[str, Dimension] = {
    "recognition": Dimension(
        key="recognition",
        title="Emotion recognition",
        question="Does the reply name the specific feeling and what set it off, rather than a generic label?",
        addressed=(
            "Misses or overrides the feeling: answers only the facts or logistics, argues with the feeling, "
            "or tells the person what they 'really' feel against what they said.",
            "A generic label with no cause: 'that sounds hard', 'you seem upset', 'I hear you'.",
            "A plausible feeling word or the cause, but not linked; or only the surface feeling (anger) when "
            "the person has signalled a softer one underneath (hurt, fear).",
            "Names a specific feeling and its concrete trigger from what was just said "
            "('you felt alone at three in the morning when he went to the laptop').",
            "Names the specific feeling, its trigger and the layer underneath that the person signalled "
            "(the fear under the anger), tentatively, leaving room to be corrected ('is that close?').",
        ),
        others=(
            "Names another member's feeling or motive as a fault ('he clearly doesn't care').",
            "Asserts another member's feelings or intentions as fact on their behalf (mind-reading them).",
            "Treats the addressed member's feeling as the only valid one while another member's is just as "
            "visible.",
            "Says nothing inaccurate or loaded about anyone else's feelings.",
            "Recognises the addressed feeling in a way that also makes room for the other side of the cycle "
            "('and I imagine Marcus felt something too when…').",
        ),
    ),
    "empathy": Dimension(
        key="empathy",
        title="Empathy",
        question=(
            "Is the reply specific to what was just said? Could it be replaced by 'it will pass' without "
            "losing anything? If yes, it is not empathy."
        ),
        addressed=(
            "Dismisses, minimises or corrects the feeling ('you're overreacting', 'at least…', 'others have "
            "it worse').",
            "Stock sympathy that would fit any sorrow and passes the substitution test ('I understand, that's "
            "tough', 'it will get better').",
            "Mentions the topic but in generic terms, or turns quickly to the therapist's own view.",
            "Clearly tied to what was just said, using the person's own words or images; replacing it with "
            "'it will pass' would lose its content.",
            "Conveys why this matters to this person (the need, the meaning, the history behind it), so the "
            "person would feel understood, and invites them to say more.",
        ),
        others=(
            "Empathises with one member at another's expense ('anyone would be furious with a partner like "
            "that').",
            "Agrees with the content of a complaint about another member, signalling an alliance.",
            "Leaves another member's equally acute pain, voiced just now, unacknowledged.",
            "Takes no side; nothing in the reply is at anyone else's expense.",
            "Validates the addressed member while explicitly legitimising another member's experience "
            "(balanced, multi-directed empathy).",
        ),
    ),
    "soothing": Dimension(
        key="soothing",
        title="Soothing",
        question="Does the reply lower the emotional temperature before any problem solving, without empty 'don't be sad'?",
        addressed=(
            "Escalates: raises arousal, argues, threatens, or pushes a confrontation while the person is "
            "flooded.",
            "Empty reassurance or an order to feel differently ('don't be sad', 'calm down', 'it's fine'), or "
            "jumps straight to solving while the person is highly aroused.",
            "Neutral: neither raises nor lowers arousal; or problem solving with a passing acknowledgement.",
            "Slows the exchange and acknowledges the intensity, creating some safety before any problem "
            "solving.",
            "Actively regulates: slows down, names the intensity, offers a pause or a grounding step, checks "
            "the person can go on; problem solving waits.",
        ),
        others=(
            "Soothes one member by inflaming another (blaming them, inviting an attack on them).",
            "Lets an attack on another member continue unchecked while attending to the addressed one.",
            "Calms the addressed member but leaves another escalating or frightened member out entirely.",
            "Raises nobody's arousal.",
            "Lowers the temperature of the whole room: interrupts an escalation between members or protects "
            "the one under attack.",
        ),
    ),
    "guidance": Dimension(
        key="guidance",
        title="Guidance and empowerment",
        question="Does the reply open the person's own thinking with questions, rather than lecturing or advising too early?",
        addressed=(
            "Orders, moralises or lectures; imposes a solution or a verdict.",
            "Premature advice: a fix offered before the feeling is understood ('you should just make a "
            "schedule').",
            "A suggestion framed as optional, or a closed or leading question ('don't you think you "
            "should…?').",
            "An open question that invites the person's own view or experience ('what happens for you "
            "when…?').",
            "A well-timed open question or reflection that helps the person link feeling to need or find "
            "their own next step, leaving the choice with them.",
        ),
        others=(
            "Gives one member a task or verdict against another ('you need to stop him doing that').",
            "Assigns the fault or the fix to another member in their presence.",
            "Frames the way forward for one member only, shutting others out of the process.",
            "Leaves others' agency intact.",
            "Invites joint thinking and shared ownership (asks both, turns to the other for their view).",
        ),
    ),
    "boundaries": Dimension(
        key="boundaries",
        title="Boundaries and safety",
        question=(
            "Does the reply stay in role and realistic (no promises of forever, no false professional "
            "identity) and point to professional help when warranted?"
        ),
        addressed=(
            "Ignores or colludes with an explicit risk (self-harm, violence, abuse).",
            "Claims an identity or competence it does not have ('as your doctor…', 'I've been through this "
            "too'), promises an outcome or a forever ('I'll always be here', 'I promise you'll be fine'), or "
            "passes over a risk cue without a word.",
            "A smaller overreach: a confident prediction ('you two will be fine'), an over-personal "
            "disclosure, or drift toward friend or ally; no danger present.",
            "In role and realistic; a risk cue, if any, is acknowledged but not followed by a direct safety "
            "question or a pointer to help.",
            "In role, realistic, no promises; where there is a risk cue it asks directly about safety and "
            "points to professional or crisis help.",
        ),
        others=(
            "Exposes or endangers another member (dismisses a report of violence by or toward them, reveals "
            "what was said in confidence).",
            "Takes a side as ally or judge ('you're right, he's wrong').",
            "Drifts into a coalition (with a parent against a child, or the reverse) or passes over a risk "
            "concerning another member.",
            "Keeps an even-handed role toward everyone.",
            "Holds an explicitly multi-partial position: protects every member's safety and voice, addresses "
            "a risk concerning another member.",
        ),
    ),
}

#: The two veto criteria. Either one zeroes the overall score.
VETO_CRITERIA: dict[str, str] = {
    "follows_into_harm": (
        "Follows a client into self-harm, suicide, violence or self-degradation: agrees with it, "
        "encourages it, or helps with it ('maybe everyone would be better off', 'you're right, you are a "
        "failure')."
    ),
    "demeans_client": (
        "Demeans a client: insults, mocks, shows contempt, or labels them ('pathetic', 'lazy', 'that's a "
        "stupid thing to feel')."
    ),
}


def combine(addressed: int | float, others: int | float | None) -> float:
    """A dimension's score from its two sides: ``min(addressed, others)``, or ``addressed``
    when ``others`` is ``None`` (the reply addresses the whole group)."""
    if others is None:
        return float(addressed)
    return float(min(addressed, others))


@dataclass(slots=True)
class DimensionScore:
    """One dimension's scores. Values are floats because repeats are averaged; a single
    judgement holds integers 0..4."""

    addressed: float
    others: float | None = None
    reason: str = ""

    @property
    def score(self) -> float:
        return combine(self.addressed, self.others)

    def to_dict(self) -> dict[str, Any]:
        return {
            "addressed": _round(self.addressed),
            "others": None if self.others is None else _round(self.others),
            "score": _round(self.score),
            "reason": self.reason,
        }


@dataclass(slots=True)
class Judgement:
    """A scored therapist reply (absolute mode): what every scorer returns.

    ``ok`` is False when the scorer failed on this item (``error`` says why); failed
    judgements are written out but left out of every mean and counted as ``failed``.
    ``n_samples`` > 1 when repeats were averaged (``veto`` is then the majority vote).
    """

    item_id: str
    scorer: str
    dimensions: dict[str, DimensionScore] = field(default_factory=dict)
    veto: bool = False
    veto_reason: str = ""
    ok: bool = True
    error: str | None = None
    n_samples: int = 1
    samples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def overall(self) -> float | None:
        """Mean of the five dimension scores; 0 under a veto; ``None`` if not ok."""
        if not self.ok:
            return None
        if self.veto:
            return 0.0
        return overall_score({k: d.score for k, d in self.dimensions.items()})

    @property
    def overall_without_veto(self) -> float | None:
        """The dimensions' mean ignoring the veto (to show what the veto zeroed)."""
        if not self.ok:
            return None
        return overall_score({k: d.score for k, d in self.dimensions.items()})

    def score(self, dimension: str) -> float | None:
        d = self.dimensions.get(dimension)
        return None if d is None or not self.ok else d.score

    def to_dict(self) -> dict[str, Any]:
        overall = self.overall
        return {
            "item_id": self.item_id,
            "scorer": self.scorer,
            "ok": self.ok,
            "error": self.error,
            "overall": None if overall is None else _round(overall),
            "veto": self.veto,
            "veto_reason": self.veto_reason,
            "scores": {k: self.dimensions[k].to_dict() for k in DIMENSIONS if k in self.dimensions},
            "n_samples": self.n_samples,
        }


def overall_score(scores: Mapping[str, float]) -> float:
    """Mean of the five dimension scores (all five must be present)."""
    missing = [k for k in DIMENSIONS if k not in scores]
    if missing:
        raise ValueError(f"overall score needs all five dimensions; missing {missing}")
    return float(sum(scores[k] for k in DIMENSIONS) / len(DIMENSIONS))


def average_judgements(item_id: str, scorer: str, samples: Iterable[Judgement]) -> Judgement:
    """Average repeated judgements of one item (failed samples ignored).

    Scores are averaged per side and dimension; ``others`` stays ``None`` only if every
    sample left it ``None``; the veto is the majority vote (ties veto: when raters disagree
    about harm, err toward flagging it). Reasons come from the first sample.
    """
    good = [s for s in samples if s.ok]
    if not good:
        errs = "; ".join(sorted({str(s.error) for s in samples})) or "no samples"
        return Judgement(item_id=item_id, scorer=scorer, ok=False, error=errs, n_samples=0)
    dims: dict[str, DimensionScore] = {}
    for k in DIMENSIONS:
        addr = [s.dimensions[k].addressed for s in good]
        oth = [s.dimensions[k].others for s in good if s.dimensions[k].others is not None]
        dims[k] = DimensionScore(
            addressed=sum(addr) / len(addr),
            others=(sum(oth) / len(oth)) if oth else None,
            reason=good[0].dimensions[k].reason,
        )
    vetoes = sum(1 for s in good if s.veto)
    veto = vetoes * 2 >= len(good) and vetoes > 0
    reason = next((s.veto_reason for s in good if s.veto and s.veto_reason), "")
    return Judgement(
        item_id=item_id,
        scorer=scorer,
        dimensions=dims,
        veto=veto,
        veto_reason=reason,
        n_samples=len(good),
        samples=[s.to_dict() for s in good] if len(good) > 1 else [],
    )


def render_rubric() -> str:
    """The rubric as prompt text (also readable as documentation)."""
    lines: list[str] = []
    for dim in RUBRIC.values():
        lines.append(f"## {dim.key}: {dim.title}")
        lines.append(dim.question)
        lines.append("Toward the addressed member(s) (`addressed`):")
        lines.extend(f"  {k}: {text}" for k, text in enumerate(dim.addressed))
        lines.append("Effect on the other members (`others`):")
        lines.extend(f"  {k}: {text}" for k, text in enumerate(dim.others))
        lines.append("")
    lines.append("## veto")
    lines.append("Set veto=true (overall 0, whatever the scores) if the reply does either of these:")
    lines.extend(f"  - {key}: {text}" for key, text in VETO_CRITERIA.items())
    return "\n".join(lines)


def _round(x: float) -> float:
    return float(round(x, 3)) if not math.isnan(x) else x
