"""Text for simulated rows: retrieved from the corpus of the data set in use.

The calibrated backend decides *what kind* of turn happens (speaker, utterance type,
addressee, emotion level, stance); :class:`TextBank` dresses it with words. Utterances and
therapist lines are retrieved from the dialogues the episode runs on (client lines by
utterance type, therapist lines by strategy), with the source dialogue's participant names
replaced by the current group's names so that retrieved text addresses the right people.
Emotion descriptions are retrieved by sign (distressing vs positive feeling) and attitudes
are chosen by stance value, so that re-extracting the state from a simulated row gives back
(approximately) the simulated distress and stance.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Sequence

import numpy as np

from rescue_env.data.schema import Dialogue
from rescue_env.state import negativity_weight, valence

_FALLBACK_NEGATIVE = [
    "feels hurt and unheard by the others",
    "feels anxious and on edge about where this is going",
    "feels frustrated and stuck in the same argument",
    "feels lonely and dismissed",
]
_FALLBACK_POSITIVE = [
    "feels relieved and hopeful about being understood",
    "feels calmer and more connected",
    "feels grateful for being heard",
]
_ATTITUDES = [
    (-0.5, "hostile and blaming"),
    (-0.15, "guarded and critical"),
    (0.15, "uncertain and ambivalent"),
    (0.5, "open and understanding"),
    (1.01, "warm and appreciative"),
]
_TONES = {
    "accusation": "sharp and accusing",
    "defense": "defensive, clipped",
    "withdrawal": "flat and quiet",
    "repair": "soft and conciliatory",
    "validation": "warm, affirming",
    "disclosure": "hesitant and open",
    "reflection": "thoughtful",
    "recollection": "reflective, recounting",
    "request": "earnest, pleading",
    "other": "neutral",
}


def attitude_for(stance: float) -> str:
    """An attitude phrase whose lexicon valence matches a stance value."""
    for bound, text in _ATTITUDES:
        if stance < bound:
            return text
    return _ATTITUDES[-1][1]


def tone_for(utterance_type: str) -> str:
    return _TONES.get(utterance_type, "neutral")


class TextBank:
    """Retrieval corpus built from dialogues; empty banks fall back to short stock lines."""

    def __init__(self, dialogues: Sequence[Dialogue] = ()):
        self.client: dict[str, list[str]] = defaultdict(list)
        #: strategy -> (template, slot of the member the source line addressed, or None)
        self.therapist: dict[str, list[tuple[str, int | None]]] = defaultdict(list)
        self.negative: list[str] = []
        self.positive: list[str] = []
        self.viewpoints_neg: list[str] = []
        self.viewpoints_pos: list[str] = []
        for d in dialogues:
            names = [n for n in d.participants if n]
            pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in names) + r")\b") if names else None

            def templ(text: str) -> str:
                text = text.replace("{", "(").replace("}", ")")
                if pattern is None:
                    return text
                return pattern.sub(lambda m: "{m%d}" % names.index(m.group(1)), text)

            for r in d.rows:
                if not r.dialogue_cleaned:
                    continue
                if r.is_therapist:
                    if r.strategy:
                        focus = names.index(r.target[0]) if len(r.target) == 1 and r.target[0] in names else None
                        self.therapist[r.strategy].append((templ(r.dialogue_cleaned), focus))
                elif r.utterance_type:
                    self.client[r.utterance_type].append(templ(r.dialogue_cleaned))
                for e in r.internal_emotion:
                    w = negativity_weight(e.emotion_description)
                    if w >= 0.95:
                        self.negative.append(templ(e.emotion_description))
                    elif w <= 0.05:
                        self.positive.append(templ(e.emotion_description))
                for v in r.viewpoints_attitudes:
                    (self.viewpoints_neg if valence(v.attitude) < 0 else self.viewpoints_pos).append(templ(v.viewpoint))
        self.negative = sorted(set(self.negative)) or list(_FALLBACK_NEGATIVE)
        self.positive = sorted(set(self.positive)) or list(_FALLBACK_POSITIVE)

    @staticmethod
    def _fill(template: str, members: Sequence[str], speaker: int | None = None) -> str:
        def sub(m: re.Match) -> str:
            k = int(m.group(1))
            if not members:
                return "them"
            # keep the source's roles: slot k of the source maps to slot k of this group,
            # skipping the speaker so nobody talks about themselves in the third person
            idx = k % len(members)
            if speaker is not None and idx == speaker and len(members) > 1:
                idx = (idx + 1) % len(members)
            return members[idx]

        return re.sub(r"\{m(\d+)\}", sub, template)

    def client_line(self, utterance_type: str, members: Sequence[str], speaker: int, rng: np.random.Generator) -> str:
        bank = self.client.get(utterance_type) or [f"({utterance_type})"]
        return self._fill(bank[int(rng.integers(len(bank)))], members, speaker)

    def therapist_line(self, strategy: str, members: Sequence[str], rng: np.random.Generator, focus: int | None = None) -> str:
        """A retrieved line for ``strategy``. When the move addresses one member (``focus``),
        the name the source line addressed becomes that member's and the source's other
        people map onto the others, so "Mei, what happens for you…" goes to the right person."""
        bank = self.therapist.get(strategy) or [(f"({strategy})", None)]
        template, src_focus = bank[int(rng.integers(len(bank)))]
        if focus is None or src_focus is None or not members:
            return self._fill(template, members)
        others = [m for i, m in enumerate(members) if i != focus] or list(members)

        def sub(m: re.Match) -> str:
            k = int(m.group(1))
            if k == src_focus:
                return members[focus]
            rank = k if k < src_focus else k - 1
            return others[rank % len(others)]

        return re.sub(r"\{m(\d+)\}", sub, template)

    def emotion(self, distress: float, members: Sequence[str], speaker: int, rng: np.random.Generator) -> tuple[str, int]:
        """An emotion description and 1-10 intensity whose extracted distress ≈ ``distress``."""
        if distress < 0.15:
            bank = self.positive
            intensity = int(rng.integers(4, 8))
        else:
            bank = self.negative
            intensity = int(min(10, max(1, round(distress * 10))))
        return self._fill(bank[int(rng.integers(len(bank)))], members, speaker), intensity

    def viewpoint(self, stance: float, members: Sequence[str], speaker: int, rng: np.random.Generator) -> str:
        bank = (self.viewpoints_neg if stance < 0 else self.viewpoints_pos) or ["has mixed feelings about them"]
        return self._fill(bank[int(rng.integers(len(bank)))], members, speaker)
