"""Typed records for RESCUE-BENCH dialogues.

One :class:`Dialogue` per benchmark sample, one :class:`Row` per annotated turn. Every field
of the benchmark schema has a typed attribute; the untouched JSON object is kept in
``raw`` so that nothing is lost (mis-decoded text in particular: attributes hold the repaired
text, ``raw`` the text as published).

Conventions kept from the data:

- relation labels distinguish ``None`` (row not annotated) from ``""`` (annotated: no clear
  pattern); see :attr:`Row.relation_label`.
- ``target`` lists mix client names, the group labels ``"Couple"`` / ``"Family"`` and
  ``"Therapist"``; a list of two or more names is a dyad or subgroup.
- intensities are numbers 1-10.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Scenario = Literal["couple", "family"]
SCENARIOS: tuple[Scenario, ...] = ("couple", "family")

THERAPIST = "Therapist"
GROUP_LABELS: dict[Scenario, str] = {"couple": "Couple", "family": "Family"}
#: Names that appear in speaker/target fields but are not clients.
NON_CLIENT_NAMES = frozenset({THERAPIST, "Couple", "Family", ""})


@dataclass(slots=True)
class PersonDescription:
    """A multimodal note about one person (``body_posture``, ``facial_expressions``,
    ``self_directed_behavior`` items)."""

    person: str
    description: str

    def to_dict(self) -> dict[str, Any]:
        return {"person": self.person, "description": self.description}


@dataclass(slots=True)
class InteractionBehavior:
    """``interaction_behavior`` item: what ``initiator`` does toward ``target``."""

    initiator: str
    target: list[str]
    description: str

    def to_dict(self) -> dict[str, Any]:
        return {"initiator": self.initiator, "target": list(self.target), "description": self.description}


@dataclass(slots=True)
class BackgroundUtterance:
    """``background_dialogue`` item: an overlapping remark during the row."""

    speaker: str
    target: list[str]
    content: str

    def to_dict(self) -> dict[str, Any]:
        return {"speaker": self.speaker, "target": list(self.target), "content": self.content}


@dataclass(slots=True)
class EmotionRecord:
    """``internal_emotion`` item: a client's annotated inner state (s_t^i)."""

    person: str
    emotion_description: str
    intensity: float

    def to_dict(self) -> dict[str, Any]:
        value: float | int = int(self.intensity) if float(self.intensity).is_integer() else self.intensity
        return {"person": self.person, "emotion_description": self.emotion_description, "intensity": value}


@dataclass(slots=True)
class ViewpointRecord:
    """``viewpoints_attitudes`` item: how ``source`` regards ``target`` (an edge of G_t)."""

    source: str
    target: str
    viewpoint: str
    attitude: str

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "viewpoint": self.viewpoint, "attitude": self.attitude}


@dataclass(slots=True)
class StrategyRecord:
    """``support_strategy`` item: the therapist's move (strategy a_t toward target A_t)."""

    provider: str
    target: list[str]
    strategy_type: str
    strategy_content: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "target": list(self.target),
            "strategy_type": self.strategy_type,
            "strategy_content": self.strategy_content,
        }


@dataclass(slots=True)
class Row:
    """One annotated turn of a dialogue, with every field of the benchmark schema."""

    row_index: int
    primary_speaker: str
    start_time: float | None = None
    end_time: float | None = None
    target: list[str] = field(default_factory=list)
    dialogue_cleaned: str = ""
    utterance_type: str = ""
    background_dialogue: list[BackgroundUtterance] = field(default_factory=list)
    tone_of_voice: str = ""
    body_posture: list[PersonDescription] = field(default_factory=list)
    facial_expressions: list[PersonDescription] = field(default_factory=list)
    self_directed_behavior: list[PersonDescription] = field(default_factory=list)
    interaction_behavior: list[InteractionBehavior] = field(default_factory=list)
    internal_emotion: list[EmotionRecord] = field(default_factory=list)
    viewpoints_attitudes: list[ViewpointRecord] = field(default_factory=list)
    support_strategy: list[StrategyRecord] = field(default_factory=list)
    #: therapist rows: the annotated pattern (RPP gold); ``None`` when the field is absent.
    relation_cycle_state: str | None = None
    relation_cycle_reason: str | None = None
    relation_cycle_evidence_rows: list[int] | None = None
    #: any row: the annotated pattern; ``None`` = not annotated, ``""`` = no clear pattern.
    relation_pattern: str | None = None
    relation_pattern_reason: str | None = None
    relation_pattern_evidence_rows: list[int] = field(default_factory=list)
    #: extra per-row columns (e.g. the simulator's ``state``); written back on export.
    extras: dict[str, Any] = field(default_factory=dict)
    #: the JSON object as read (unrepaired text); empty for rows built in code.
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def is_therapist(self) -> bool:
        return self.primary_speaker == THERAPIST

    @property
    def relation_label(self) -> str | None:
        """The row's relation label (the RPP gold): ``relation_cycle_state`` on therapist
        rows, ``relation_pattern`` on the others, as PROTOCOL.md defines it.

        The other field is used only when the row's own field is absent (``None``) and the
        other carries a label: some exports put ``relation_cycle_state: ""`` on client rows
        as filler, which must not read as "no clear pattern".
        ``None`` = not annotated; ``""`` = annotated as no clear pattern.
        """
        own, other = (
            (self.relation_cycle_state, self.relation_pattern)
            if self.is_therapist
            else (self.relation_pattern, self.relation_cycle_state)
        )
        if own is not None:
            return own
        return other or None

    @property
    def strategy(self) -> str | None:
        """The first annotated strategy label of a therapist row, else ``None``."""
        for item in self.support_strategy:
            if item.strategy_type:
                return item.strategy_type
        return None

    def to_dict(self) -> dict[str, Any]:
        """The row as a benchmark-schema JSON object (repaired text, plus ``extras``)."""
        out: dict[str, Any] = {
            "start_time": self.start_time,
            "end_time": self.end_time,
            "primary_speaker": self.primary_speaker,
            "target": list(self.target),
            "dialogue_cleaned": self.dialogue_cleaned,
            "utterance_type": self.utterance_type,
            "background_dialogue": [b.to_dict() for b in self.background_dialogue],
            "tone_of_voice": self.tone_of_voice,
            "body_posture": [p.to_dict() for p in self.body_posture],
            "facial_expressions": [p.to_dict() for p in self.facial_expressions],
            "self_directed_behavior": [p.to_dict() for p in self.self_directed_behavior],
            "interaction_behavior": [i.to_dict() for i in self.interaction_behavior],
            "internal_emotion": [e.to_dict() for e in self.internal_emotion],
            "viewpoints_attitudes": [v.to_dict() for v in self.viewpoints_attitudes],
            "support_strategy": [s.to_dict() for s in self.support_strategy],
            "row_index": self.row_index,
        }
        if self.relation_cycle_state is not None:
            out["relation_cycle_state"] = self.relation_cycle_state
            if self.relation_cycle_reason is not None or self.relation_cycle_evidence_rows is not None:
                out["relation_cycle_reason"] = self.relation_cycle_reason
                out["relation_cycle_evidence_rows"] = list(self.relation_cycle_evidence_rows or [])
        out["relation_pattern"] = self.relation_pattern
        out["relation_pattern_reason"] = self.relation_pattern_reason
        out["relation_pattern_evidence_rows"] = list(self.relation_pattern_evidence_rows)
        out.update(self.extras)
        return out


@dataclass(slots=True)
class Dialogue:
    """One benchmark sample: a couple or family session segment.

    ``participants`` are the clients (V in the model), in the order given by the data or,
    when absent, in order of first appearance. ``mentioned`` holds other people that the
    annotations name (an absent stepparent), who are not clients.
    """

    sample_id: str
    scenario: Scenario
    participants: list[str]
    rows: list[Row]
    source_file: str = ""
    mentioned: list[str] = field(default_factory=list)
    #: where the record was read from: ``(file, line)`` for error messages and provenance.
    origin: tuple[str, int] = ("", 0)
    extras: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def group_label(self) -> str:
        """``"Couple"`` or ``"Family"``."""
        return GROUP_LABELS[self.scenario]

    def __len__(self) -> int:
        return len(self.rows)

    def to_dict(self) -> dict[str, Any]:
        """The dialogue as a benchmark-schema JSON object (one line of a ``.jsonl``)."""
        out: dict[str, Any] = {
            "sample_id": self.sample_id,
            "scenario": self.scenario,
            "participants": list(self.participants),
            "source_file": self.source_file,
        }
        out.update(self.extras)
        out["rows"] = [r.to_dict() for r in self.rows]
        return out
