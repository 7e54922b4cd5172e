"""Who each participant is, as far as the data says: their role in the group and gender.

Simulated text is read by people, so a retrieved line must fit its speaker: a son does not
say "my son", a husband does not say "my husband" to his wife. :func:`cast_of` derives, for
each participant of a dialogue, a :class:`Speaker` with

- ``role``: ``"partner"`` in a couple session (every participant, however many: the data
  has a three-partner couple), and in a family session ``"parent"``, ``"child"`` or
  ``"other"`` (grandparent, aunt…) from kinship evidence, else ``"unknown"``;
- ``gender``: ``"female"``, ``"male"`` or ``"unknown"``.

The evidence is what the annotations really hold (there is no gender or role field):

- the person's own non-verbal descriptions ("fidgeting with a tissue in *his* hands") and
  reflexive phrases in their own emotions ("angry at *herself*", "*her own* anger");
- the therapist's non-verbal descriptions when it addresses one person ("turns attention
  directly to *the son*", "toward *the mother*") — gender and family role at once;
- a vocative kin word at the start of a line addressed to one person ("*Mum*, you ring the
  school"): the addressee is that parent, the speaker their child;
- kin words after the person's own possessive in their emotions ("concerned for *her son*"):
  a parent.

Votes are counted and a value is taken only on a clear majority; otherwise the honest answer
is ``"unknown"``, and callers treat unknown as "no constraint" rather than as a guess.
Parent evidence outranks child evidence (a parent speaks of *her* mother too).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Literal

from rescue_env.data.schema import THERAPIST, Dialogue

Role = Literal["partner", "parent", "child", "other", "unknown"]
Gender = Literal["female", "male", "unknown"]
UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Speaker:
    """A participant as text retrieval sees them (see the module docstring)."""

    name: str
    role: Role = "unknown"
    gender: Gender = "unknown"


#: kin word -> (gender it implies or None, family role of the person it names)
KIN: dict[str, tuple[Gender | None, Role]] = {
    "mother": ("female", "parent"), "mom": ("female", "parent"), "mum": ("female", "parent"),
    "mommy": ("female", "parent"), "mummy": ("female", "parent"), "mama": ("female", "parent"),
    "stepmother": ("female", "parent"), "stepmom": ("female", "parent"), "stepmum": ("female", "parent"),
    "father": ("male", "parent"), "dad": ("male", "parent"), "daddy": ("male", "parent"),
    "stepfather": ("male", "parent"), "stepdad": ("male", "parent"),
    "son": ("male", "child"), "stepson": ("male", "child"), "boy": ("male", "child"),
    "daughter": ("female", "child"), "stepdaughter": ("female", "child"), "girl": ("female", "child"),
    "brother": ("male", "child"), "sister": ("female", "child"),
    "grandmother": ("female", "other"), "grandma": ("female", "other"), "nan": ("female", "other"),
    "grandfather": ("male", "other"), "grandpa": ("male", "other"), "granddad": ("male", "other"),
    "aunt": ("female", "other"), "uncle": ("male", "other"),
    "husband": ("male", "partner"), "wife": ("female", "partner"),
    "boyfriend": ("male", "partner"), "girlfriend": ("female", "partner"),
}
#: what a person's own possessive + kin word says about them ("her son" -> a parent)
OFFSPRING = frozenset({"son", "daughter", "stepson", "stepdaughter", "children", "kids", "child", "kid"})

_KIN_WORDS = "|".join(sorted(KIN, key=len, reverse=True))
_THE_KIN = re.compile(r"\b(?:the|her|his)\s+(?:younger\s+|older\s+|teenage\s+)?(" + _KIN_WORDS + r")\b", re.I)
_VOCATIVE = re.compile(r"^\s*(mum|mom|mummy|mommy|mama|dad|daddy)\b\s*[,.!?]", re.I)
_OWN_KIN = re.compile(r"\b(?:his|her)\s+(?:own\s+)?(" + _KIN_WORDS + r"|children|kids|child|kid)\b", re.I)
# a possessive before a body part or an object held is the person's own ("his hands")
_OWN_BODY = re.compile(
    r"\b(his|her)\s+(?:own\s+)?(?:\w+\s+)?(hands?|arms?|head|face|eyes|hair|lap|legs?|knees?|shoulders?|fingers?|chin|mouth|lips|jaw|"
    r"neck|chest|body|seat|chair|tissue|ring|phone|glasses|sleeves?|jacket|forehead|brow|temples?|wrists?|feet|palms?|thighs?|nails|cheeks?|gaze|voice)\b",
    re.I,
)
_MY_KIN = re.compile(r"\b(my|your)\s+(?:own\s+)?(" + _KIN_WORDS + r"|children|kids|child|kid|parents)\b", re.I)
#: a reflexive or "own" possessive: the person it is said of is its gender ("her own anger")
REFLEXIVE = re.compile(r"\b(himself|herself|his own|her own)\b", re.I)


def pronoun_gender(word: str) -> Gender:
    """The gender of a third-person possessive or reflexive ("his", "himself", "her own")."""
    return "male" if word.lower().startswith(("his", "him")) else "female"


def cast_of(dialogue: Dialogue) -> dict[str, Speaker]:
    """Each participant's :class:`Speaker` from the dialogue's own rows (see module docs)."""
    names = [n for n in dialogue.participants if n]
    names_set = set(names)
    gender_votes: dict[str, Counter[str]] = defaultdict(Counter)
    role_votes: dict[str, set[str]] = defaultdict(set)
    for row in dialogue.rows:
        for rec in (*row.body_posture, *row.facial_expressions, *row.self_directed_behavior):
            if rec.person in names:
                for m in _OWN_BODY.finditer(rec.description):
                    gender_votes[rec.person][pronoun_gender(m.group(1))] += 1
            elif rec.person == THERAPIST and len(row.target) == 1 and row.target[0] in names:
                for m in _THE_KIN.finditer(rec.description):
                    gender, role = KIN[m.group(1).lower()]
                    if gender:
                        gender_votes[row.target[0]][gender] += 2  # explicit, worth more than a pronoun
                    role_votes[row.target[0]].add(role)
        for emo in row.internal_emotion:
            if emo.person not in names:
                continue
            for m in REFLEXIVE.finditer(emo.emotion_description):
                gender_votes[emo.person][pronoun_gender(m.group(1))] += 1
            for m in _OWN_KIN.finditer(emo.emotion_description):
                if m.group(1).lower() in OFFSPRING:
                    role_votes[emo.person].add("parent")
        speaker = row.primary_speaker
        if speaker in names and len(row.target) == 1 and row.target[0] in names and row.target[0] != speaker:
            m = _VOCATIVE.match(row.dialogue_cleaned or "")
            if m:
                gender, _ = KIN[m.group(1).lower()]
                gender_votes[row.target[0]][gender or UNKNOWN] += 2
                role_votes[row.target[0]].add("parent")
                role_votes[speaker].add("child")
        if dialogue.scenario == "family" and (speaker in names_set or speaker == THERAPIST):
            # "my son" makes the speaker a parent, "your dad" said to one person makes them a
            # child, "my mum" a child (outranked by parent evidence: parents have mothers too)
            addressee = row.target[0] if len(row.target) == 1 and row.target[0] in names and row.target[0] != speaker else None
            for m in _MY_KIN.finditer(row.dialogue_cleaned or ""):
                word = m.group(2).lower()
                holder = speaker if m.group(1).lower() == "my" else addressee
                if holder is None or holder == THERAPIST:
                    continue
                if word in OFFSPRING:
                    role_votes[holder].add("parent")
                elif word == "parents" or word in ("brother", "sister") or KIN[word][1] == "parent":
                    role_votes[holder].add("child")
    cast: dict[str, Speaker] = {}
    for name in names:
        votes = gender_votes[name]
        female, male = votes["female"], votes["male"]
        # a clear majority only: pronouns in descriptions also point at other people
        gender: Gender = "female" if female >= 2 * male and female > 0 else "male" if male >= 2 * female and male > 0 else "unknown"
        if dialogue.scenario == "couple":
            role: Role = "partner"
        else:
            # a husband or wife named in a family session is one of its parents
            seen = {"parent" if r == "partner" else r for r in role_votes[name]}
            role = next((r for r in ("parent", "child", "other") if r in seen), "unknown")  # type: ignore[assignment]
        cast[name] = Speaker(name, role, gender)
    return cast
