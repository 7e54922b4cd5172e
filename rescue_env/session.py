"""One simulated session: state + transcript + step. Both environments adapt it.

A :class:`Session` starts from a seed dialogue cut at a row: the state is extracted from the
rows before the cut (:func:`rescue_env.state.extract_state` rules) and, when recording, those
rows open the transcript. Each :meth:`Session.step` takes the therapist's flat action (see
:class:`~rescue_env.taxonomy.ActionEncoding`), lets the client backend respond, and appends
the new rows in the benchmark schema: a therapist row when it speaks (``support_strategy``
and ``relation_cycle_state`` filled), then one row per client turn (``utterance_type``,
``internal_emotion``, ``viewpoints_attitudes``, ``relation_pattern``). Every generated row
carries the state after the step in its ``state`` column, so :meth:`Session.to_dialogue`
is a benchmark record that any loader of the benchmark can read.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from rescue_env.data.schema import THERAPIST, Dialogue, EmotionRecord, Row, StrategyRecord, ViewpointRecord
from rescue_env.dynamics.base import TO_GROUP, TO_THERAPIST, Behaviour, ClientBackend, ClientTurn, TherapistMove
from rescue_env.dynamics.text import TextBank, attitude_for, tone_for
from rescue_env.state import GroupState, StateTracker
from rescue_env.taxonomy.actions import ActionEncoding


@dataclass
class StepResult:
    """What one step did. ``rows`` is empty when the session does not record."""

    move: TherapistMove
    turns: list[ClientTurn]
    rows: list[Row] = field(default_factory=list)
    invalid_action: bool = False


class Session:
    """A therapist-and-clients session over a client backend.

    Args:
        dialogue: the seed dialogue (its first ``start_row`` rows are the history).
        start_row: number of seed rows before the simulation starts (0..len(rows)).
        backend: the client model (:class:`~rescue_env.dynamics.calibrated.CalibratedBackend`
            or an LLM backend).
        encoding: the action encoding; its ``max_members`` caps the group (extra members of
            a larger family are left out, in participant order).
        rng: the generator every random choice draws from.
        record: build benchmark rows (off in training for speed; the state still moves).
        text_bank: retrieval corpus for utterance text; stock lines when ``None``.
        prefix_cache: a dict the caller keeps across sessions on the same dialogues; when
            not recording, the state extracted from the seed rows is cached there (resets
            are then a copy instead of a replay of the prefix).
    """

    def __init__(
        self,
        dialogue: Dialogue,
        start_row: int,
        backend: ClientBackend,
        encoding: ActionEncoding,
        rng: np.random.Generator,
        *,
        record: bool = True,
        text_bank: TextBank | None = None,
        prefix_cache: dict | None = None,
    ):
        if not 0 <= start_row <= len(dialogue.rows):
            raise ValueError(f"start_row={start_row} outside 0..{len(dialogue.rows)} for {dialogue.sample_id!r}")
        self.dialogue = dialogue
        self.start_row = start_row
        self.backend = backend
        self.encoding = encoding
        self.rng = rng
        # text choices draw from their own stream so that recording never changes the episode;
        # the seed is drawn either way, the generator built only when text is needed
        self._text_seed = int(rng.integers(2**63 - 1))
        self._text_rng: np.random.Generator | None = None
        self.record = record
        self.text_bank = text_bank if text_bank is not None else TextBank()
        self.members: tuple[str, ...] = tuple(dialogue.participants[: encoding.max_members])
        if not self.members:
            raise ValueError(f"dialogue {dialogue.sample_id!r} has no participants")
        key = (dialogue.sample_id, start_row, self.members)
        self.rows: list[Row] = []
        if not record and prefix_cache is not None and key in prefix_cache:
            self.state: GroupState = prefix_cache[key].copy()
        else:
            tracker = StateTracker(dialogue.scenario, self.members)
            for row in dialogue.rows[:start_row]:
                st = tracker.update(row)
                if record:
                    self.rows.append(replace(row, extras={**row.extras, "state": st.to_dict(), "simulated": False}))
            self.state = tracker.state
            if prefix_cache is not None:
                prefix_cache[key] = self.state.copy()
        self._valid_targets = encoding.target_mask(len(self.members)).astype(bool).tolist()
        self._moves: list[tuple[TherapistMove, bool] | None] = [None] * encoding.n_actions
        self.t = 0
        self.streak = 0
        self.n_interventions = 0
        self._row_index = dialogue.rows[start_row - 1].row_index if start_row else 0
        last_end = dialogue.rows[start_row - 1].end_time if start_row else 0.0
        self._clock = float(last_end or 0.0)

    # --------------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.members)

    @property
    def text_rng(self) -> np.random.Generator:
        """The generator of text choices (separate from the dynamics' stream)."""
        if self._text_rng is None:
            self._text_rng = np.random.default_rng(self._text_seed)
        return self._text_rng

    def action_mask(self) -> np.ndarray:
        """Flat ``int8`` mask of the actions valid for this group."""
        return self.encoding.mask(self.n)

    def _decode(self, action: int) -> tuple[TherapistMove, bool]:
        decision = self.encoding.decode(action)
        if not decision.intervene:
            return TherapistMove(False), False
        if not self._valid_targets[decision.target]:
            return TherapistMove(False), True
        slots = self.encoding.target_slots(decision.target, self.n)  # type: ignore[arg-type]
        name = self.encoding.strategy_names[decision.strategy]  # type: ignore[index]
        return TherapistMove(True, decision.target, slots, decision.strategy, name), False

    def move_for(self, action: int, text: str = "") -> tuple[TherapistMove, bool]:
        """Decode a flat action; an action masked out for this group becomes listening
        (returned flag ``True``) rather than an error, so unmasked learners can run.
        The returned move is shared between steps: treat it as read-only."""
        a = int(action)
        if not 0 <= a < self.encoding.n_actions:
            self.encoding.decode(a)  # raises the encoding's out-of-range error
        cached = self._moves[a]
        if cached is None:  # decoded once per session and action: step() is a hot path
            cached = self._moves[a] = self._decode(a)
        move, invalid = cached
        if text and move.intervene:
            move = TherapistMove(True, move.target, move.slots, move.strategy, move.strategy_name, text)
        return move, invalid

    def step(
        self,
        action: int,
        *,
        behaviours: dict[int, Behaviour | None] | None = None,
        therapist_text: str = "",
    ) -> StepResult:
        """Advance one step with the therapist's flat ``action``."""
        move, invalid = self.move_for(action, therapist_text)
        pattern_before = self.state.pattern
        turns = self.backend.step(self.state, move, self.rng, streak=self.streak, behaviours=behaviours)
        st = self.state
        st.untended += 1
        if move.intervene:
            for i in move.slots:
                st.untended[i] = 0
            st.last_strategy = move.strategy_name
            st.last_target = tuple(self.members[i] for i in move.slots)
            self.streak += 1
            self.n_interventions += 1
        else:
            self.streak = 0
        if turns:
            st.last_speaker = self.members[turns[-1].slot]
        elif move.intervene:
            st.last_speaker = THERAPIST
        self.t += 1
        if self.record:
            rows = self._rows(move, turns, pattern_before)
        else:
            rows = []
            self._row_index += int(move.intervene) + len(turns)
        st.row_index = self._row_index
        if self.record:
            state_col = st.to_dict()
            for row in rows:
                row.extras["state"] = state_col
        return StepResult(move, turns, rows, invalid)

    # transcript ---------------------------------------------------------------------------
    def _next_times(self, text: str) -> tuple[float, float]:
        start = self._clock + 0.4
        end = start + max(1.0, len(text.split()) / 2.6)
        self._clock = end
        return round(start, 2), round(end, 2)

    def _rows(self, move: TherapistMove, turns: list[ClientTurn], pattern_before: str | None) -> list[Row]:
        st = self.state
        rows: list[Row] = []
        members = list(self.members)
        if move.intervene:
            target = self.encoding.target_label(move.target, members)  # type: ignore[arg-type]
            focus = move.slots[0] if len(move.slots) == 1 else None
            text = move.text or self.text_bank.therapist_line(move.strategy_name or "", members, self.text_rng, focus)
            self._row_index += 1
            start, end = self._next_times(text)
            rows.append(
                Row(
                    row_index=self._row_index,
                    primary_speaker=THERAPIST,
                    start_time=start,
                    end_time=end,
                    target=list(target),
                    dialogue_cleaned=text,
                    utterance_type="",
                    tone_of_voice="calm, attentive",
                    support_strategy=[StrategyRecord(THERAPIST, list(target), move.strategy_name or "", f"simulated {move.strategy_name} move")],
                    relation_cycle_state=pattern_before or "",
                    relation_cycle_reason="simulated: the group's pattern when the therapist spoke",
                    relation_cycle_evidence_rows=[],
                    relation_pattern=None,
                    extras={"simulated": True, "step": self.t},
                )
            )
        for turn in turns:
            name = members[turn.slot]
            if turn.addressee == TO_THERAPIST:
                target = [THERAPIST]
            elif turn.addressee == TO_GROUP:
                target = [self.dialogue.group_label]
            else:
                target = [members[turn.addressee]]
            text = turn.text or self.text_bank.client_line(turn.utterance_type, members, turn.slot, self.text_rng)
            if turn.emotion is not None and turn.intensity is not None:
                emotion, intensity = turn.emotion, turn.intensity
            else:
                emotion, intensity = self.text_bank.emotion(float(st.distress[turn.slot]), members, turn.slot, self.text_rng)
            viewpoints = []
            if turn.stances:
                viewpoints = [ViewpointRecord(name, members[j], vp, att) for j, vp, att in turn.stances]
            elif turn.addressee >= 0:
                g = float(st.stance[turn.slot, turn.addressee])
                viewpoints = [ViewpointRecord(name, members[turn.addressee], self.text_bank.viewpoint(g, members, turn.slot, self.text_rng), attitude_for(g))]
            self._row_index += 1
            start, end = self._next_times(text)
            rows.append(
                Row(
                    row_index=self._row_index,
                    primary_speaker=name,
                    start_time=start,
                    end_time=end,
                    target=target,
                    dialogue_cleaned=text,
                    utterance_type=turn.utterance_type,
                    tone_of_voice=tone_for(turn.utterance_type),
                    internal_emotion=[EmotionRecord(name, emotion, float(intensity))],
                    viewpoints_attitudes=viewpoints,
                    relation_pattern=st.pattern or "",
                    relation_pattern_reason="simulated: the group's pattern after the turn",
                    relation_pattern_evidence_rows=[],
                    extras={"simulated": True, "step": self.t},
                )
            )
            st.emotion[turn.slot] = emotion
            st.intensity[turn.slot] = float(intensity)
        self.rows.extend(rows)
        return rows

    def to_dialogue(self, sample_id: str | None = None, **extras: Any) -> Dialogue:
        """The session so far as a benchmark :class:`Dialogue` (seed rows, then simulated
        ones); ``extras`` become extra top-level keys (agent, episode, return…)."""
        if not self.record:
            raise RuntimeError("this session does not record its transcript (record=False)")
        return Dialogue(
            sample_id=sample_id or f"sim/{self.dialogue.sample_id}",
            scenario=self.dialogue.scenario,
            participants=list(self.members),
            rows=list(self.rows),
            source_file=f"simulated from {self.dialogue.sample_id} at row {self.start_row}",
            extras={"seed_sample_id": self.dialogue.sample_id, "start_row": self.start_row, **extras},
        )

