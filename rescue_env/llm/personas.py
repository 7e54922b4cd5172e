"""Client personas: who each client is, what they privately feel, and what they have heard.

A :class:`Persona` is seeded from the dialogue an episode starts from: the client's name,
their role in the group, and their annotated emotion and viewpoints (latest
``internal_emotion`` and ``viewpoints_attitudes`` items before the cut) as private state. An
:class:`EpisodeMemory` holds the personas of one episode and the transcript they hear: the
session's own rows when the backend is attached to a recording session, else the seed rows
plus the lines the backend produced itself.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rescue_env.data.schema import GROUP_LABELS, THERAPIST, Dialogue, Row
from rescue_env.dynamics.base import TO_GROUP, TO_THERAPIST
from rescue_env.dynamics.text import attitude_for
from rescue_env.llm import prompts
from rescue_env.state import GroupState

if TYPE_CHECKING:
    from rescue_env.session import Session


@dataclass
class Persona:
    """One client as an LLM plays them; ``emotion``/``intensity``/``views`` are private state
    (s_t^i and row i of G_t in words), updated by the client's own self-reports."""

    slot: int
    name: str
    role: str
    emotion: str = ""
    intensity: float | None = None
    #: other member's slot -> (viewpoint, attitude)
    views: dict[int, tuple[str, str]] = field(default_factory=dict)

    def private_state(self, members: tuple[str, ...], stance_row: Any) -> str:
        """The private state in words, for the persona's prompt."""
        # annotations are third-person notes ("feels hurt", "she never listens"): quoted as notes
        if self.emotion and self.intensity is not None:
            feel = f"How you feel: {self.emotion} (intensity {int(round(self.intensity))}/10)."
        else:
            feel = "How you feel: not said yet."
        lines = [feel]
        for j, other in enumerate(members):
            if j == self.slot:
                continue
            if j in self.views:
                viewpoint, attitude = self.views[j]
                lines.append(f"How you see {other}: {viewpoint} (attitude: {attitude}).")
            else:
                lines.append(f"How you see {other}: {attitude_for(float(stance_row[j]))}.")
        return "\n".join(lines)


def default_role(name: str, scenario: str, others: list[str], roles: dict[str, str] | None = None) -> str:
    """The role line of a persona: the dialogue's own ``roles`` entry when it has one, else
    the member's place in the group (the LLM infers family roles from the transcript)."""
    if roles and roles.get(name):
        return str(roles[name])
    if scenario == "couple":
        # the release's "couple" may have three partners: name every other one
        return f"one partner of a couple (with {', '.join(others)})" if others else "one partner of a couple"
    return f"a member of the family (with {', '.join(others)})"


class EpisodeMemory:
    """The personas and transcript of one episode (one :class:`GroupState`)."""

    def __init__(
        self,
        state: GroupState,
        dialogue: Dialogue | None = None,
        start_row: int = 0,
        *,
        session: Session | None = None,
        tag: str | None = None,
    ) -> None:
        self.scenario = state.scenario
        self.members: tuple[str, ...] = state.members
        self.group_label = GROUP_LABELS[state.scenario]
        # weak: the session holds the state, and the backend forgets the episode with its state
        self._session = weakref.ref(session) if session is not None else None
        self.tag = tag
        self._rendered = prompts.RenderedRows(strategies=True)
        self._state = weakref.ref(state)
        self.step = 0
        #: transcript lines produced since the start (used when no recording session is attached)
        self.lines: list[str] = []
        #: slot -> (step, reply) answered ahead by an LLMClientPolicy for this step
        self.pre_answers: dict[int, tuple[int, Any]] = {}
        seed_rows: list[Row] = list(dialogue.rows[:start_row]) if dialogue is not None else []
        self.lines = [prompts.render_row(r, strategies=True) for r in seed_rows]
        roles = dialogue.extras.get("roles") if dialogue is not None and isinstance(dialogue.extras.get("roles"), dict) else None
        index = {m: i for i, m in enumerate(self.members)}
        self.personas: list[Persona] = []
        for i, name in enumerate(self.members):
            others = [m for m in self.members if m != name]
            intensity = float(state.intensity[i])
            self.personas.append(
                Persona(
                    slot=i,
                    name=name,
                    role=default_role(name, self.scenario, others, roles),
                    emotion=state.emotion[i],
                    intensity=None if math.isnan(intensity) else intensity,
                )
            )
        for row in seed_rows:
            for v in row.viewpoints_attitudes:
                i, j = index.get(v.source), index.get(v.target)
                if i is not None and j is not None and i != j:
                    self.personas[i].views[j] = (v.viewpoint, v.attitude)

    @property
    def session(self) -> Session | None:
        """The session the memory was attached to (None if none, or once it is gone)."""
        return self._session() if self._session is not None else None

    def bind(self, session: Session) -> None:
        """Hear ``session``'s rows from now on (the episode's personas and step are kept)."""
        self._session = weakref.ref(session)

    # transcript -----------------------------------------------------------------------------
    def history(self) -> list[str]:
        """Transcript lines so far: the attached session's rows when it records them (real
        therapist lines included), else the memory's own lines."""
        session = self.session
        if session is not None and session.record:
            return list(self._rendered.lines(session.rows))
        return list(self.lines)

    def stance_row(self, slot: int) -> Any:
        """Row ``slot`` of the live G_t (zeros once the episode's state is gone)."""
        session = self.session
        state = session.state if session is not None else self._state()
        return state.stance[slot] if state is not None else [0.0] * len(self.members)

    def label_of(self, addressee: int) -> str:
        """Transcript label of an addressee code (a slot, TO_THERAPIST or TO_GROUP)."""
        if addressee == TO_THERAPIST:
            return THERAPIST
        if addressee == TO_GROUP:
            return self.group_label
        return self.members[addressee]

    def addressee_of(self, label: str, speaker: int) -> int:
        """Addressee code of a label from a reply (unknown labels or oneself: the therapist)."""
        if label == self.group_label:
            return TO_GROUP if len(self.members) > 1 else TO_THERAPIST
        if label in self.members:
            j = self.members.index(label)
            return j if j != speaker else TO_THERAPIST
        return TO_THERAPIST

    def addressees(self, speaker: int) -> list[str]:
        """Who ``speaker`` may address: the therapist, each other member, the whole group."""
        others = [m for i, m in enumerate(self.members) if i != speaker]
        return [THERAPIST, *others, *([self.group_label] if len(self.members) > 1 else [])]
