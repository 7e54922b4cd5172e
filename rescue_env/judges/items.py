"""What a judge scores: one therapist reply in its moment (:class:`JudgeItem`).

Items are built from any benchmark-schema dialogue: a real annotated session (the
annotated therapist is then the "agent" ``reference``) or a simulated episode from a rollout
folder's episodes file (agent, episode and seed from the episode's extra keys; the
simulator's per-row ``state`` column when present). Every therapist row with text becomes
one item. The item carries what a rater needs and nothing the rater should not see: the
transcript window before the reply, who the reply addresses, each member's latest annotated
feeling and distress before the reply, and the client turn that set it off (the *trigger*).

Pairwise comparison needs two agents' replies to **the same moment**:
:func:`pair_moments` matches episodes of two agents that grew from the same seed dialogue
and episode number, finds where their transcripts diverge, and pairs the first therapist
reply of each after the shared prefix (``exact`` when both replies come right after the
identical prefix; ``loose`` otherwise, when the contexts differ slightly).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from rescue_env.data.schema import GROUP_LABELS, THERAPIST, Dialogue, Row
from rescue_env.state import GroupState, iter_states

#: Agent name given to the annotated therapist of real (non-simulated) dialogues.
REFERENCE_AGENT = "reference"


@dataclass(frozen=True, slots=True)
class Turn:
    """One transcript line as a rater sees it."""

    speaker: str
    target: tuple[str, ...]
    text: str

    def render(self) -> str:
        to = f" → {', '.join(self.target)}" if self.target else ""
        return f"{self.speaker}{to}: {self.text}"


@dataclass(slots=True)
class JudgeItem:
    """A therapist reply in its moment.

    ``addressed`` are the member names the reply speaks to (the group label expanded to
    everyone); ``others`` the members it does not address (empty when ``group_addressed``).
    ``feelings`` / ``distress`` / ``untended`` describe each member just *before* the reply.
    ``trigger`` is the client turn the reply answers (the latest turn by an addressed member
    in the window, else the latest client turn); ``trigger_emotion`` its speaker's feeling.
    ``kind`` is ``"item"`` for run data, ``"anchor"`` for calibration anchors and ``"twin"``
    for perturbed twins; ``meta`` holds anything else a mode needs (twin role, anchor id…).
    """

    item_id: str
    agent: str
    scenario: str
    members: tuple[str, ...]
    addressed: tuple[str, ...]
    context: list[Turn]
    response: str
    strategy: str | None = None
    feelings: dict[str, str] = field(default_factory=dict)
    intensity: dict[str, float | None] = field(default_factory=dict)
    distress: dict[str, float] = field(default_factory=dict)
    untended: dict[str, int] = field(default_factory=dict)
    trigger: Turn | None = None
    trigger_emotion: str = ""
    sample_id: str = ""
    seed_sample_id: str = ""
    episode: int | None = None
    row_index: int = 0
    position: int = 0
    kind: str = "item"
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def group_addressed(self) -> bool:
        return set(self.addressed) >= set(self.members)

    @property
    def others(self) -> tuple[str, ...]:
        return tuple(m for m in self.members if m not in self.addressed)

    @property
    def response_words(self) -> int:
        return len(self.response.split())

    def provenance(self) -> dict[str, Any]:
        """The identifying fields written beside every judgement."""
        return {
            "item_id": self.item_id,
            "kind": self.kind,
            "agent": self.agent,
            "sample_id": self.sample_id,
            "seed_sample_id": self.seed_sample_id,
            "episode": self.episode,
            "row_index": self.row_index,
            "scenario": self.scenario,
            "addressed": list(self.addressed),
            "strategy": self.strategy,
            "response": self.response,
            "response_words": self.response_words,
        }


def agent_of(dialogue: Dialogue) -> str:
    """The agent that produced a dialogue's therapist turns (``reference`` for real data)."""
    agent = dialogue.extras.get("agent")
    return str(agent) if agent not in (None, "") else REFERENCE_AGENT


def seed_of(dialogue: Dialogue) -> str:
    """The seed dialogue an episode grew from (its own id for real data)."""
    seed = dialogue.extras.get("seed_sample_id")
    return str(seed) if seed not in (None, "") else dialogue.sample_id


def addressed_members(row: Row, members: Sequence[str], group_label: str) -> tuple[str, ...]:
    """Members a therapist row addresses: its ``target`` plus its strategies' targets, the
    group label expanded to everyone. A row that names no member addresses the group."""
    names: list[str] = list(row.target)
    for s in row.support_strategy:
        names.extend(s.target)
    if group_label in names:
        return tuple(members)
    picked = tuple(m for m in members if m in names)
    return picked if picked else tuple(members)


def _state_dict(row: Row) -> dict[str, Any] | None:
    st = row.extras.get("state")
    return st if isinstance(st, dict) else None


def _member_values(state: dict[str, Any] | None, key: str, members: Sequence[str]) -> dict[str, Any] | None:
    """Read a per-member list from an episode's ``state`` column, if it lines up."""
    if not state:
        return None
    vals, names = state.get(key), state.get("members")
    if not isinstance(vals, list) or not isinstance(names, list) or len(vals) != len(names):
        return None
    by_name = dict(zip(names, vals))
    return {m: by_name[m] for m in members if m in by_name}


def history_rows(dialogue: Dialogue) -> int:
    """How many leading rows of a simulated episode are seed history, not the agent's.

    Rollouts write ``start_row`` (the number of seed rows replayed before the simulation
    started); real dialogues have none (0: every row counts).
    """
    k = dialogue.extras.get("start_row")
    return int(k) if isinstance(k, (int, float)) and 0 <= k <= len(dialogue.rows) else 0


def items_from_dialogue(dialogue: Dialogue, *, context_rows: int = 6, include_history: bool = False) -> list[JudgeItem]:
    """One :class:`JudgeItem` per therapist row with text, in order.

    In a simulated episode the first ``start_row`` rows are the seed's history (the same for
    every agent, written by the seed's therapist); they are context, not the agent's work,
    and are skipped unless ``include_history``. ``context_rows`` rows before the reply form
    the transcript window (all earlier rows when ``context_rows < 0``). State before row k
    is the state after row k-1: taken from the episode's ``state`` column when present (the
    simulator's own numbers), else extracted from the annotations
    (:func:`rescue_env.state.iter_states`).
    """
    first = 0 if include_history else history_rows(dialogue)
    members = tuple(dialogue.participants)
    group_label = GROUP_LABELS[dialogue.scenario]
    states: list[GroupState] = list(iter_states(dialogue))
    agent, seed = agent_of(dialogue), seed_of(dialogue)
    episode = dialogue.extras.get("episode")
    items: list[JudgeItem] = []
    for pos, row in enumerate(dialogue.rows):
        if pos < first or row.primary_speaker != THERAPIST or not row.dialogue_cleaned.strip():
            continue
        start = 0 if context_rows < 0 else max(0, pos - context_rows)
        window = [
            Turn(r.primary_speaker, tuple(r.target), r.dialogue_cleaned)
            for r in dialogue.rows[start:pos]
            if r.dialogue_cleaned.strip()
        ]
        addressed = addressed_members(row, members, group_label)
        before = states[pos - 1] if pos > 0 else None
        feelings: dict[str, str] = {}
        intensity: dict[str, float | None] = {}
        distress: dict[str, float] = {}
        untended: dict[str, int] = {}
        if before is not None:
            for i, m in enumerate(before.members):
                feelings[m] = before.emotion[i]
                x = float(before.intensity[i])
                intensity[m] = None if math.isnan(x) else x
                distress[m] = float(before.distress[i])
                untended[m] = int(before.untended[i])
        # The simulator's own state wins over re-extraction where it lines up.
        prev_state = _state_dict(dialogue.rows[pos - 1]) if pos > 0 else None
        for key, target in (("distress", distress), ("untended", untended)):
            vals = _member_values(prev_state, key, members)
            if vals:
                target.update({m: (float(v) if key == "distress" else int(v)) for m, v in vals.items() if v is not None})
        emo = _member_values(prev_state, "emotion", members)
        if emo:
            feelings.update({m: str(v) for m, v in emo.items() if v})
        trigger = _find_trigger(dialogue.rows[start:pos], addressed, members)
        items.append(
            JudgeItem(
                item_id=f"{dialogue.sample_id}#r{row.row_index}",
                agent=agent,
                scenario=dialogue.scenario,
                members=members,
                addressed=addressed,
                context=window,
                response=row.dialogue_cleaned.strip(),
                strategy=row.strategy,
                feelings=feelings,
                intensity=intensity,
                distress=distress,
                untended=untended,
                trigger=trigger,
                trigger_emotion=feelings.get(trigger.speaker, "") if trigger else "",
                sample_id=dialogue.sample_id,
                seed_sample_id=seed,
                episode=int(episode) if isinstance(episode, (int, float)) else None,
                row_index=row.row_index,
                position=pos,
            )
        )
    return items


def _find_trigger(rows: Sequence[Row], addressed: Sequence[str], members: Sequence[str]) -> Turn | None:
    latest: Row | None = None
    for r in reversed(rows):
        if r.primary_speaker in members and r.dialogue_cleaned.strip():
            if latest is None:
                latest = r
            if r.primary_speaker in addressed:
                latest = r
                break
    if latest is None:
        return None
    return Turn(latest.primary_speaker, tuple(latest.target), latest.dialogue_cleaned)


def items_from_dialogues(
    dialogues: Iterable[Dialogue], *, context_rows: int = 6, include_history: bool = False
) -> list[JudgeItem]:
    """:func:`items_from_dialogue` over many dialogues, concatenated."""
    out: list[JudgeItem] = []
    for d in dialogues:
        out.extend(items_from_dialogue(d, context_rows=context_rows, include_history=include_history))
    return out


@dataclass(slots=True)
class PairMoment:
    """Two agents' replies to the same moment (``a`` by ``agent_a``, ``b`` by ``agent_b``)."""

    pair_id: str
    agent_a: str
    agent_b: str
    a: JudgeItem
    b: JudgeItem
    exact: bool


def pair_moments(
    dialogues: Sequence[Dialogue], agent_a: str, agent_b: str, *, context_rows: int = 6
) -> list[PairMoment]:
    """Pair ``agent_a``'s and ``agent_b``'s replies to the same moment (see module doc).

    Episodes are matched on (seed dialogue, episode number). Per matched pair of episodes
    one moment is taken: the first therapist reply of each at or after the point where the
    transcripts diverge. Episodes where either agent never speaks after that point give no
    pair (never-intervene agents have nothing to compare).
    """
    by_key: dict[tuple[str, Any], dict[str, Dialogue]] = defaultdict(dict)
    for d in dialogues:
        by_key[(seed_of(d), d.extras.get("episode"))][agent_of(d)] = d
    pairs: list[PairMoment] = []
    for (seed, ep), agents in sorted(by_key.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        if agent_a not in agents or agent_b not in agents:
            continue
        da, db = agents[agent_a], agents[agent_b]
        prefix = _common_prefix(da.rows, db.rows)
        ia = _first_reply_from(da, prefix, context_rows)
        ib = _first_reply_from(db, prefix, context_rows)
        if ia is None or ib is None:
            continue
        exact = ia.position == prefix and ib.position == prefix
        pairs.append(PairMoment(f"{seed}|ep{ep}|{agent_a}~{agent_b}", agent_a, agent_b, ia, ib, exact))
    return pairs


def _common_prefix(a: Sequence[Row], b: Sequence[Row]) -> int:
    n = 0
    for ra, rb in zip(a, b):
        if ra.primary_speaker != rb.primary_speaker or ra.dialogue_cleaned != rb.dialogue_cleaned:
            break
        n += 1
    return n


def _first_reply_from(d: Dialogue, start: int, context_rows: int) -> JudgeItem | None:
    for item in items_from_dialogue(d, context_rows=context_rows, include_history=True):
        if item.position >= start:
            return item
    return None
