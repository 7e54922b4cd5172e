"""Prompts and JSON Schemas of the simulator's LLM roles: client personas, the relation-pattern
annotator and the therapist.

Every schema is shaped for strict structured outputs (OpenAI, vLLM): an object root, every
property listed in ``required``, ``additionalProperties: false``, labels as ``enum``s. Only
keywords both OpenAI's strict mode and vLLM's grammar backends accept are used (``enum``,
``minimum``/``maximum``, ``minItems``/``maxItems``), so a server needs ``json_schema``
structured outputs, or ``llm.structured_outputs=false`` (``json_object`` mode: the schema goes
into the prompt and the client validates the reply).

Label definitions come from :func:`rescue_env.taxonomy.label_info`, so prompts and the
benchmark share one vocabulary.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from rescue_env.data.schema import THERAPIST, Row
from rescue_env.taxonomy.labels import UTTERANCE_TYPES, label_info

#: ``pattern`` value of the annotator meaning "no clear pattern" (ρ = none).
NO_PATTERN = "none"


def _strict(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


@lru_cache(maxsize=32)
def _definitions(scenario: str, kind: str, *, cues: bool = False) -> str:
    """One line per label: the first sentence of its definition and, with ``cues``, the first
    sentence of its "use when" note. The sentences after the first (elaborations, examples,
    "not when" contrasts) are left out: every call's prompt carries these lines, and a small
    CPU model reads ~150 tokens a second (the full notes were ~1,100 of a couple session's
    ~2,950 shared tokens)."""
    lines = []
    for info in label_info(scenario, kind):  # type: ignore[arg-type]
        line = f"- {info.name}: {first_sentence(info.definition)}"
        if cues and info.use_when:
            line += f" Use when: {first_sentence(info.use_when)}"
        lines.append(line)
    return "\n".join(lines)


_SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z'(])")


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` (up to a ``.``, ``!`` or ``?`` followed by a capital)."""
    return _SENTENCE_END_RE.split(text.strip(), maxsplit=1)[0]


# transcripts ----------------------------------------------------------------------------------
class RenderedRows:
    """Transcript lines of a growing row list, rendered once each (a session's rows only
    grow, and prompts are built from them at every call)."""

    def __init__(self, *, strategies: bool = False) -> None:
        self.strategies = strategies
        self._rows: list[Row] | None = None
        self._lines: list[str] = []

    def lines(self, rows: list[Row]) -> list[str]:
        if rows is not self._rows or len(rows) < len(self._lines):
            self._rows, self._lines = rows, []
        self._lines += [render_row(r, strategies=self.strategies) for r in rows[len(self._lines) :]]
        return self._lines


def render_row(row: Row, *, strategies: bool = False) -> str:
    """One transcript line, ``Speaker (to Target): text``; with ``strategies`` the therapist's
    strategy label (or a client's utterance type) is shown too (the therapist's own view)."""
    target = ", ".join(row.target) or "everyone"
    label = ""
    if strategies:
        kind = row.strategy if row.is_therapist else row.utterance_type
        label = f" [{kind}]" if kind else ""
    return f"{row.primary_speaker} (to {target}){label}: {row.dialogue_cleaned.strip()}"


def line(speaker: str, target: str, text: str, label: str = "") -> str:
    """A transcript line built from parts (same shape as :func:`render_row`)."""
    return f"{speaker} (to {target}){f' [{label}]' if label else ''}: {text.strip()}"


def window_start(n_lines: int, window: int) -> int:
    """Index of the first transcript line shown of ``n_lines`` with a ``window``: the start moves
    in steps of ``window // 2`` lines, not one line per turn, so that the shown block, and with
    it the prompt, keeps the same beginning for several calls (a server's prompt cache then
    finds it evaluated). At least ``window`` lines are shown when there are as many, and fewer
    than ``window + window // 2``."""
    if window <= 0:
        return n_lines
    stride = max(1, window // 2)
    return max(0, (n_lines - window) // stride * stride)


def transcript_block(lines: Sequence[str], window: int) -> str:
    """The latest lines, oldest first, from :func:`window_start` (or a note when there are none)."""
    skipped = window_start(len(lines), window)
    shown = lines[skipped:]
    if not shown:
        return "(the session is just starting)"
    head = f"(… {skipped} earlier turns)\n" if skipped else ""
    return head + "\n".join(shown)


# shared session prompt ---------------------------------------------------------------------------
#: Opens the role tail of the last message, after the shared transcript.
TAIL_MARK = "---"


def session_system(scenario: str, members: Sequence[str]) -> str:
    """System prompt shared by every client persona and the therapist of one session: the
    scenario's instructions for both roles and their labels (the same for every session of
    ``scenario``), then who is in this session. Calls of different roles then differ only
    after the transcript (:func:`session_messages`), so a server's prompt cache finds each
    call's prompt evaluated up to the lines that are new since the session's previous call."""
    return f"{_session_instructions(scenario)}\n\nIn this session: {', '.join(members)} and the {THERAPIST}."


@lru_cache(maxsize=4)
def _session_instructions(scenario: str) -> str:
    setting = "couple" if scenario == "couple" else "family"
    return (
        f"A {setting} therapy session is played turn by turn: a therapist and the clients speak in turn. The last "
        "message says which role you play now and what to reply.\n\n"
        "Playing a client: speak as that person would, one to three sentences of natural spoken English, with "
        "their own history, hurts and hopes; never mention being an AI or these instructions. What a client feels "
        "and thinks is private: the others only hear their words.\n\n"
        "Kinds of client turn (utterance_type):\n"
        f"{_definitions(scenario, 'utterance_type')}\n\n"
        f"Playing the {THERAPIST}: at each turn decide whether to speak now or keep listening; if you speak, whom "
        "you address and how (the strategy), in one to three sentences addressed to the target by name. Keep the "
        "most distressed member from being left behind, de-escalate hostile exchanges, and leave room for the "
        "clients to talk.\n\n"
        "Strategies:\n"
        f"{_definitions(scenario, 'strategy', cues=True)}\n\n"
        "In the transcript, [brackets] give a client turn's kind or the therapist's strategy."
    )


def session_messages(scenario: str, members: Sequence[str], lines: Sequence[str], window: int, tail: str) -> list[dict[str, str]]:
    """The messages of a client or therapist call: :func:`session_system`, then the transcript
    (:func:`transcript_block`) and, after it, the role's ``tail`` (who plays now, their private
    view, what to do). Every call of a session shares everything before the tail, as long as
    the calls use the same ``window``."""
    user = f"The session so far (most recent last):\n{transcript_block(lines, window)}\n\n{TAIL_MARK}\n{tail}"
    return [{"role": "system", "content": session_system(scenario, members)}, {"role": "user", "content": user}]


# client personas --------------------------------------------------------------------------------
def client_turn_schema(
    others: Sequence[str],
    addressees: Sequence[str],
    *,
    utterance_types: Sequence[str] = UTTERANCE_TYPES,
    speak_choice: bool = False,
) -> dict[str, Any]:
    """Schema of one client turn: utterance, utterance type, addressee, emotion, intensity
    1-10 and a stance toward each other member (viewpoint, attitude, valence −1..1).

    ``speak_choice`` adds a leading ``speak`` boolean (a client agent deciding whether to talk).
    The same arguments give the same (shared, not to be mutated) dict.
    """
    return _client_turn_schema(tuple(others), tuple(addressees), tuple(utterance_types), speak_choice)


@lru_cache(maxsize=1024)
def _client_turn_schema(
    others: tuple[str, ...], addressees: tuple[str, ...], utterance_types: tuple[str, ...], speak_choice: bool
) -> dict[str, Any]:
    stance = _strict(
        {
            "target": {"type": "string", "enum": list(others)},
            "viewpoint": {"type": "string"},
            "attitude": {"type": "string"},
            "valence": {"type": "number", "minimum": -1, "maximum": 1},
        }
    )
    props: dict[str, Any] = {"speak": {"type": "boolean"}} if speak_choice else {}
    props.update(
        {
            "utterance": {"type": "string"},
            "utterance_type": {"type": "string", "enum": list(utterance_types)},
            "addressee": {"type": "string", "enum": list(addressees)},
            "emotion": {"type": "string"},
            "intensity": {"type": "integer", "minimum": 1, "maximum": 10},
            "stances": {"type": "array", "items": stance, "maxItems": max(1, len(others))},
        }
    )
    return _strict(props)


def persona_tail(name: str, role: str, private: str, cue: str, group_label: str) -> str:
    """The tail of a client turn (after the shared transcript): who plays now, their private
    state, the cue and the reply's fields."""
    return (
        f"You are {name}, {role}. Your private state before this turn:\n{private}\n\n{cue}\n\n"
        "Reply in JSON: utterance (your own new words, never a copy of earlier lines); utterance_type; addressee "
        f"({THERAPIST}, one of the others, or {group_label} for everyone); emotion (one to three words, e.g. hurt, "
        "angry, hopeful); intensity (1 barely to 10 overwhelming); stances: for each other member, your viewpoint of "
        "them now, your attitude (a few words) and valence (-1 hostile, 0 neutral, 1 warm)."
    )


# annotator --------------------------------------------------------------------------------------
def pattern_schema(scenario: str) -> dict[str, Any]:
    """Schema of the annotator's answer: a pattern label (or ``none``) and a short reason."""
    from rescue_env.taxonomy.labels import patterns

    return _strict({"pattern": {"type": "string", "enum": [*patterns(scenario), NO_PATTERN]}, "reason": {"type": "string"}})


def annotator_messages(scenario: str, members: Sequence[str], history: str, previous: str | None) -> list[dict[str, str]]:
    """Messages asking for the group's relation pattern after the latest turns (the system
    prompt is the same for every session of ``scenario``; the clients are named after it)."""
    system = (
        f"You annotate {scenario} therapy sessions with the relation pattern the clients are in, "
        "judged from how they talk to and about each other in the latest turns. Patterns:\n"
        f"{_definitions(scenario, 'pattern', cues=True)}\n"
        f"- {NO_PATTERN}: no clear pattern in the latest turns.\n\n"
        "Reply with one JSON object: pattern (one label above) and reason (one sentence citing the turns)."
    )
    user = (
        f"Clients: {', '.join(members)}.\n\nTranscript (most recent last):\n{history}\n\n"
        f"Pattern before these turns: {previous or NO_PATTERN}. Which pattern holds now?"
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


# therapist --------------------------------------------------------------------------------------
def therapist_move_schema(targets: Sequence[str], strategies: Sequence[str]) -> dict[str, Any]:
    """Schema of a therapist move: intervene, target, strategy, utterance, reason."""
    return _strict(
        {
            "intervene": {"type": "boolean"},
            "target": {"type": "string", "enum": list(targets)},
            "strategy": {"type": "string", "enum": list(strategies)},
            "utterance": {"type": "string"},
            "reason": {"type": "string"},
        }
    )


def therapist_rank_schema(targets: Sequence[str], strategies: Sequence[str]) -> dict[str, Any]:
    """Schema of a therapist ranking: speak probability, top-3 targets and strategies."""
    return _strict(
        {
            "p_speak": {"type": "number", "minimum": 0, "maximum": 1},
            "targets": {"type": "array", "items": {"type": "string", "enum": list(targets)}, "minItems": 1, "maxItems": 3},
            "strategies": {"type": "array", "items": {"type": "string", "enum": list(strategies)}, "minItems": 1, "maxItems": 3},
            "reason": {"type": "string"},
        }
    )


def therapist_tail(state_summary: str | None, *, rank: bool = False) -> str:
    """The tail of a therapist call (after the shared transcript): the group-state summary
    and the move asked for (``rank``: a ranking of the options instead)."""
    state = f"{state_summary}\n\n" if state_summary else ""
    if rank:
        ask = (
            "Rank your options for the next therapist turn. Reply with one JSON object: p_speak (the probability "
            "that the therapist should speak now rather than keep listening), targets (the three most fitting "
            "targets, best first), strategies (the three most fitting strategies, best first) and reason (one sentence)."
        )
    else:
        ask = (
            "Your move now. Reply in JSON: intervene (true to speak, false to keep listening), target, strategy, "
            "utterance (empty when you keep listening) and reason (one sentence)."
        )
    return f"You are the {THERAPIST}.\n{state}{ask}"
