"""One episode's view: who is in it, where it started, its state and its transcript.

The numbers of an episode live in the simulator core (:mod:`rescue_env.core`); a
:class:`Session` is what the envs hand to people and LLMs: the members, the seed dialogue
and cut, a :class:`~rescue_env.state.GroupState` view of the live state (one object per
episode, refreshed by the env after each step), and, when recording, the transcript in the
benchmark schema: the seed rows before the cut, then per step a therapist row when it speaks
(``support_strategy`` and ``relation_cycle_state`` filled) and one row per client turn
(``utterance_type``, ``internal_emotion``, ``viewpoints_attitudes``, ``relation_pattern``).
Every generated row carries the state after the step in its ``state`` column, so
:meth:`Session.to_dialogue` is a benchmark record that any loader of the benchmark can read.
Text comes from the retrieval bank (or the LLM clients' own words); it is built only when
recording, never on the training path.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rescue_env.data.schema import THERAPIST, Dialogue, EmotionRecord, Row, StrategyRecord, ViewpointRecord
from rescue_env.dynamics.base import TO_GROUP, TO_THERAPIST, ClientTurn, TherapistMove
from rescue_env.dynamics.text import EpisodeText, TextBank, attitude_for, tone_for
from rescue_env.state import GroupState, StateTracker
from rescue_env.taxonomy.actions import ActionEncoding


class Session:
    """One episode of a therapist-and-clients session (see the module docstring).

    Args:
        dialogue: the seed dialogue (its first ``start_row`` rows are the history).
        start_row: number of seed rows before the simulation starts.
        members: the group (the dialogue's participants, up to the env's cap).
        state: the live state view (the env refreshes it after each step).
        encoding: the action encoding.
        record: build benchmark rows (off in training).
        text_bank: retrieval corpus for utterance text; stock lines when ``None``.
        text_seed: seed of the text choices (their own stream: recording never changes
            the episode).
    """

    def __init__(
        self,
        dialogue: Dialogue,
        start_row: int,
        members: tuple[str, ...],
        state: GroupState,
        encoding: ActionEncoding,
        *,
        record: bool = True,
        text_bank: TextBank | None = None,
        text_seed: int = 0,
    ):
        self.dialogue = dialogue
        self.start_row = start_row
        self.members = tuple(members)
        self.state = state
        self.encoding = encoding
        self.record = record
        self.text_bank = text_bank if text_bank is not None else TextBank()
        self._text_seed = int(text_seed)
        self._text: EpisodeText | None = None
        #: steps played (kept by the env)
        self.t = 0
        self.rows: list[Row] = []
        if record:
            tracker = StateTracker(dialogue.scenario, self.members)
            for row in dialogue.rows[:start_row]:
                st = tracker.update(row)
                self.rows.append(replace(row, extras={**row.extras, "state": st.to_dict(), "simulated": False}))
        self._row_index = dialogue.rows[start_row - 1].row_index if start_row else 0
        last_end = dialogue.rows[start_row - 1].end_time if start_row else 0.0
        self._clock = float(last_end or 0.0)
        self._valid_targets = encoding.target_mask(len(self.members)).astype(bool).tolist()

    # --------------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.members)

    @property
    def text(self) -> EpisodeText:
        """The episode's text choices (their own random stream, separate from the dynamics';
        built on first use, so an episode that records nothing never builds it)."""
        if self._text is None:
            self._text = self.text_bank.episode(self.dialogue, self.members, self._text_seed)
        return self._text

    def move_for(self, action: int, text: str = "") -> tuple[TherapistMove, bool]:
        """Decode a flat action as the core plays it: an action masked out for this group is
        listening (returned flag ``True``). Raises ``ValueError`` out of range."""
        decision = self.encoding.decode(int(action))
        if not decision.intervene:
            return TherapistMove(False), False
        if not self._valid_targets[decision.target]:
            return TherapistMove(False), True
        slots = self.encoding.target_slots(decision.target, self.n)  # type: ignore[arg-type]
        name = self.encoding.strategy_names[decision.strategy]  # type: ignore[index]
        return TherapistMove(True, decision.target, slots, decision.strategy, name, text), False

    def record_step(self, move: TherapistMove | None, turns: list[ClientTurn], pattern_before: str | None) -> list[Row]:
        """Append the step's rows to the transcript (after the env refreshed :attr:`state`);
        returns them (empty when not recording; ``move`` is only needed when recording)."""
        if not self.record or move is None:
            return []
        rows = self._rows(move, turns, pattern_before)
        state_col = self.state.to_dict()
        for row in rows:
            row.extras["state"] = state_col
        return rows

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
            text = move.text or self.text.therapist_line(move.strategy_name or "", move.slots)
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
            text = turn.text or self.text.client_line(turn.utterance_type, turn.slot, turn.addressee, float(st.distress[turn.slot]))
            if turn.emotion is not None and turn.intensity is not None:
                emotion, intensity = turn.emotion, turn.intensity
            else:
                emotion, intensity = self.text.emotion(float(st.distress[turn.slot]), turn.slot)
            viewpoints = []
            if turn.stances:
                viewpoints = [ViewpointRecord(name, members[j], vp, att) for j, vp, att in turn.stances]
            elif turn.addressee >= 0:
                g = float(st.stance[turn.slot, turn.addressee])
                viewpoints = [ViewpointRecord(name, members[turn.addressee], self.text.viewpoint(g, turn.slot, turn.addressee), attitude_for(g))]
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

