"""The group state (s_t, G_t, ρ_t) and its extraction from annotated rows.

One function serves three uses: it seeds simulated episodes from a real or bundled dialogue,
turns real dialogues into observations for the static tasks, and summarises simulated
episodes. The rules, applied row by row in order (:class:`StateTracker`):

- **Members** (V) are the dialogue's ``participants`` (clients; never the therapist nor
  people only mentioned).
- **Emotion and intensity** (s_t^i): the latest ``internal_emotion`` item whose ``person``
  is member i, carried forward until the next one. A member never annotated so far has no
  emotion, intensity ``nan`` and distress :data:`UNKNOWN_DISTRESS`.
- **Distress** d(s_t^i) ∈ [0, 1]: ``intensity / 10`` times a negativity weight
  ``clip(0.6 − v, 0, 1)``, where v ∈ [−1, 1] is the lexicon valence (VADER compound) of
  the emotion description. A clearly negative feeling (v ≤ −0.4) counts fully, a neutral
  one 60 %, a clearly positive one (v ≥ 0.6) not at all: "feels hopeful, 6" is not distress.
- **Stance** g_ij ∈ [−1, 1] (G_t): the valence of the latest ``viewpoints_attitudes`` item
  with source i and target j (both members): the attitude text's valence, or half the
  viewpoint's valence when the attitude reads neutral. Carried forward; 0 until annotated;
  the diagonal is always 0. Items toward the group label, the therapist or non-members are
  ignored for G (they still shape the transcript).
- **Pattern** ρ_t: the latest row's relation label (``Row.relation_label``) that is
  annotated; ``""`` (no clear pattern) resets it to ``None``; a label outside the dialogue's
  own taxonomy is ignored.
- **Untended** turns: rows since the therapist last addressed member i (directly, in a
  dyad, or through the group label); counted from the start of the dialogue.

Valence comes from VADER (a lexicon shipped inside the ``vaderSentiment`` package; no model
is downloaded), extended with a few clinical words VADER scores as neutral
(:data:`CLINICAL_LEXICON`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Iterator, Sequence

import numpy as np

from rescue_env.data.schema import GROUP_LABELS, THERAPIST, Dialogue, Row, Scenario
from rescue_env.taxonomy.labels import patterns as scenario_patterns

#: Distress assumed for a member not annotated yet (they came to therapy: mildly distressed).
UNKNOWN_DISTRESS = 0.3

#: Words VADER leaves neutral that carry clear valence in therapy annotations (VADER scale
#: −4..4). Chosen by reading the annotation vocabulary, not fitted.
CLINICAL_LEXICON: dict[str, float] = {
    "heavy": -1.2, "divide": -1.0, "finished": -0.8, "reluctant": -1.0, "avoidant": -1.2,
    "withdrawn": -1.3, "defensive": -1.5, "deflecting": -1.2, "dismissive": -1.6, "guarded": -1.0,
    "blaming": -1.8, "contempt": -2.5, "contemptuous": -2.5, "critical": -1.2, "resigned": -1.2,
    "resignation": -1.2, "detached": -1.2, "distant": -1.0, "cold": -1.0, "sidelined": -1.3,
    "dismissed": -1.5, "invalidated": -1.8, "unheard": -1.5, "misunderstood": -1.5,
    "overwhelmed": -1.8, "exhausted": -1.6, "trapped": -1.8, "stuck": -1.2, "helpless": -2.0,
    "ashamed": -2.0, "guilty": -1.6, "anxious": -1.8, "frustrated": -1.8, "irritated": -1.6,
    "empathic": 1.8, "empathetic": 1.8, "understanding": 1.5, "accountable": 1.0,
    "self-accountable": 1.0, "receptive": 1.5, "warm": 1.8, "softening": 1.2, "softened": 1.2,
    "tender": 1.5, "reassured": 1.8, "validated": 1.5, "curious": 0.8, "engaged": 0.8,
    "appreciative": 1.8, "conciliatory": 1.5, "open": 0.6, "calmer": 1.2, "calm": 1.2,
}


@lru_cache(maxsize=1)
def _analyzer():
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    analyzer = SentimentIntensityAnalyzer()
    analyzer.lexicon.update(CLINICAL_LEXICON)
    return analyzer


@lru_cache(maxsize=65536)
def valence(text: str) -> float:
    """Valence of a short text in [−1, 1] (VADER compound with the clinical additions)."""
    if not text or not text.strip():
        return 0.0
    return float(_analyzer().polarity_scores(text)["compound"])


def negativity_weight(description: str) -> float:
    """How much of an emotion's intensity counts as distress: ``clip(0.6 − valence, 0, 1)``."""
    return float(min(1.0, max(0.0, 0.6 - valence(description))))


def distress_of(description: str, intensity: float) -> float:
    """d(s) ∈ [0, 1] for an emotion description and a 1-10 intensity."""
    if intensity is None or (isinstance(intensity, float) and math.isnan(intensity)):
        return UNKNOWN_DISTRESS
    return float(min(1.0, max(0.0, float(intensity) / 10.0)) * negativity_weight(description))


def stance_of(attitude: str, viewpoint: str = "") -> float:
    """g ∈ [−1, 1] from an attitude text, falling back on half the viewpoint's valence."""
    v = valence(attitude)
    if abs(v) < 0.05 and viewpoint:
        v = 0.5 * valence(viewpoint)
    return float(v)


@dataclass(eq=False)
class GroupState:
    """(s_t, G_t, ρ_t) after a given row, plus the bookkeeping agents use.

    Arrays are indexed by member slot (the order of ``members``). ``row_index`` is the
    1-based index of the last row applied (0: before the first row).
    """

    scenario: Scenario
    members: tuple[str, ...]
    distress: np.ndarray
    intensity: np.ndarray
    emotion: list[str]
    stance: np.ndarray
    pattern: str | None = None
    row_index: int = 0
    untended: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    last_speaker: str | None = None
    last_strategy: str | None = None
    last_target: tuple[str, ...] = ()
    #: the turn just before the decision, as the real transcript tells it (extracted states;
    #: the simulator leaves them empty): the latest client speaker, the last row's utterance
    #: type and whom that row addressed. Not part of equality (bookkeeping for models of the
    #: therapist's next move, e.g. :mod:`rescue_env.agents.prior`).
    last_client: str | None = None
    last_utterance_type: str = ""
    last_addressee: tuple[str, ...] = ()
    #: the therapist's moves so far in the transcript, ``(strategy, members addressed)`` per
    #: therapist row with a strategy (extracted states; the simulator leaves it empty): the
    #: session's own style, bookkeeping like the turn above, not part of equality
    moves: tuple[tuple[str, int], ...] = ()

    @property
    def n(self) -> int:
        return len(self.members)

    def __eq__(self, other: object) -> bool:
        # arrays compare element-wise; NaN intensities (never annotated) count as equal
        if not isinstance(other, GroupState):
            return NotImplemented
        return (
            self.scenario == other.scenario
            and self.members == other.members
            and np.array_equal(self.distress, other.distress)
            and np.array_equal(self.intensity, other.intensity, equal_nan=True)
            and self.emotion == other.emotion
            and np.array_equal(self.stance, other.stance)
            and self.pattern == other.pattern
            and self.row_index == other.row_index
            and np.array_equal(self.untended, other.untended)
            and self.last_speaker == other.last_speaker
            and self.last_strategy == other.last_strategy
            and self.last_target == other.last_target
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __deepcopy__(self, memo: dict) -> GroupState:
        # SB3's DummyVecEnv deep-copies every info dict each step; the generic deepcopy of
        # this object cost more than the simulation step itself.
        return self.copy()

    def worst_off(self) -> int:
        """Slot of the most distressed member (lowest slot on ties)."""
        return int(np.argmax(self.distress))

    def max_distress(self) -> float:
        return float(self.distress.max()) if len(self.members) else 0.0

    def mean_distress(self) -> float:
        # sum/n rather than ndarray.mean(): several times cheaper on tiny arrays (hot path)
        n = len(self.members)
        return float(self.distress.sum()) / n if n else 0.0

    def mean_stance(self) -> float:
        """Mean of g_ij over ordered pairs i ≠ j (0 for a group of one)."""
        n = len(self.members)
        if n < 2:
            return 0.0
        # a plain left-to-right sum: the simulator core (rescue_env.core._sigma_star) adds in the same order, so
        # both give bit-equal rewards (numpy's pairwise sum and Python 3.12's sum() differ)
        total = 0.0
        for row in self.stance.tolist():
            for x in row:
                total += x
        return total / (n * (n - 1))

    def copy(self) -> GroupState:
        """An independent copy (arrays and lists copied; strings and tuples shared)."""
        # filled field by field without __init__: envs copy the state into every step's info
        new = object.__new__(GroupState)
        new.__dict__.update(self.__dict__)
        new.distress = self.distress.copy()
        new.intensity = self.intensity.copy()
        new.stance = self.stance.copy()
        new.untended = self.untended.copy()
        new.emotion = list(self.emotion)
        return new

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the ``state`` column of exported episodes)."""
        return {
            "members": list(self.members),
            "distress": [round(float(x), 4) for x in self.distress],
            "intensity": [None if math.isnan(x) else round(float(x), 2) for x in self.intensity],
            "emotion": list(self.emotion),
            "stance": [[round(float(x), 4) for x in row] for row in self.stance],
            "pattern": self.pattern,
            "untended": [int(x) for x in self.untended],
            "row_index": self.row_index,
        }

    def summary(self) -> str:
        """One line: pattern, then each member's distress (worst-off marked)."""
        worst = self.worst_off() if self.n else -1
        parts = [
            f"{'*' if i == worst else ''}{m}={self.distress[i]:.2f}" for i, m in enumerate(self.members)
        ]
        return f"[{self.pattern or 'no pattern'}] " + " ".join(parts) + f" | mean stance {self.mean_stance():+.2f}"


class StateTracker:
    """Applies rows one by one to a :class:`GroupState` following the module's rules."""

    def __init__(self, scenario: Scenario, members: Sequence[str]):
        self.scenario = scenario
        self.members = tuple(members)
        self.index = {m: i for i, m in enumerate(self.members)}
        self._patterns = frozenset(scenario_patterns(scenario))
        self._group_label = GROUP_LABELS[scenario]
        n = len(self.members)
        self.state = GroupState(
            scenario=scenario,
            members=self.members,
            distress=np.full(n, UNKNOWN_DISTRESS),
            intensity=np.full(n, np.nan),
            emotion=[""] * n,
            stance=np.zeros((n, n)),
            untended=np.zeros(n, dtype=np.int64),
        )

    def addressed_slots(self, targets: Sequence[str]) -> set[int]:
        """Member slots a target list reaches (the group label reaches everyone)."""
        slots: set[int] = set()
        for t in targets:
            if t == self._group_label:
                slots.update(range(len(self.members)))
            elif t in self.index:
                slots.add(self.index[t])
        return slots

    def update(self, row: Row) -> GroupState:
        st = self.state
        for e in row.internal_emotion:
            i = self.index.get(e.person)
            if i is not None:
                st.emotion[i] = e.emotion_description
                st.intensity[i] = float(e.intensity)
                st.distress[i] = distress_of(e.emotion_description, float(e.intensity))
        for v in row.viewpoints_attitudes:
            i, j = self.index.get(v.source), self.index.get(v.target)
            if i is not None and j is not None and i != j:
                st.stance[i, j] = stance_of(v.attitude, v.viewpoint)
        label = row.relation_label
        if label is not None:
            if label == "":
                st.pattern = None
            elif label in self._patterns:
                st.pattern = label
        st.untended += 1
        if row.primary_speaker == THERAPIST:
            targets = list(row.target)
            for s in row.support_strategy:
                targets.extend(s.target)
            slots = self.addressed_slots(targets)
            for i in slots:
                st.untended[i] = 0
            st.last_strategy = row.strategy
            st.last_target = tuple(self.members[i] for i in sorted(slots))
            if row.support_strategy:
                first = row.support_strategy[0]
                st.moves = (*st.moves, (first.strategy_type, len(self.addressed_slots(first.target or row.target))))
        st.last_speaker = row.primary_speaker
        if row.primary_speaker in self.index:
            st.last_client = row.primary_speaker
        st.last_utterance_type = row.utterance_type
        st.last_addressee = tuple(row.target)
        st.row_index = row.row_index
        return st


def iter_states(dialogue: Dialogue) -> Iterator[GroupState]:
    """Yield a copy of the state after each row, in order (O(rows))."""
    tracker = StateTracker(dialogue.scenario, dialogue.participants)
    for row in dialogue.rows:
        yield tracker.update(row).copy()


def extract_state(dialogue: Dialogue, upto: int | None = None) -> GroupState:
    """The state after the first ``upto`` rows of ``dialogue`` (all rows when ``None``;
    ``0`` gives the state before any row). ``upto`` counts rows by position, 1-based."""
    if upto is None:
        upto = len(dialogue.rows)
    if not 0 <= upto <= len(dialogue.rows):
        raise ValueError(f"upto={upto} outside 0..{len(dialogue.rows)} for {dialogue.sample_id!r}")
    tracker = StateTracker(dialogue.scenario, dialogue.participants)
    for row in dialogue.rows[:upto]:
        tracker.update(row)
    return tracker.state.copy()
