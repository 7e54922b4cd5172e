"""Text for simulated rows: retrieved from the corpus of the data set in use, fitted to the speaker.

The calibrated backend decides *what kind* of turn happens (speaker, utterance type,
addressee, emotion level, stance); the text layer dresses it with words that a person reading
the transcript (the report, an LLM judge) will accept. :class:`TextBank` is the corpus, built
once per data set; :class:`EpisodeText` is one episode's choices (its own random stream, so
recording never changes an episode, and its memory of what was said).

**Retrieval.** A client line is drawn from the lines of real rows whose speaker has the same
role and gender as the current speaker (:mod:`rescue_env.dynamics.speakers`), with the same
utterance type, addressee and emotion sign. When that cell has nothing usable, conditions are
dropped in this order (the back-off, :data:`CLIENT_BACKOFF`):

1. type, role, gender, addressee (therapist / group / a member of that role and gender), sign
2. without the emotion sign
3. addressee only as therapist / group / member
4. without the addressee
5. without the gender
6. type only (speakers of unknown role)
7. short neutral stock lines (counted in :attr:`EpisodeText.stats`)

A known role is never crossed: a parent's line is not given to a child at any level.

An unknown role or gender (of the speaker or of a source line) is no constraint: that level
is the same as the one without it. Therapist lines back off from (strategy, focus member's
role and gender) to strategy, then stock; emotion descriptions from (sign, feeler's role and
gender) to sign, then stock phrases; viewpoints from (sign, target's gender) to sign.

**Hard rules** at every level reject a line whose kinship words contradict the people
(:func:`line_fits`): a child saying "my son", "my husband" when the partner is a woman,
"Mum," to someone who is not the group's mother, "his son" in the feelings of a son, "she"
about a partner who is a man; and a line that would name someone foreign to the group (a
name from another dialogue's world after the source's participants are remapped onto this
group). Source names map by position in the source row: its speaker becomes the speaker, its
addressee the addressee, other people the remaining members of the closest role and gender;
a line that names more people than the group has is rejected, never wrapped onto the wrong
person.

**No verbatim repeat** within an episode: a spoken line (client or therapist) is used once;
when every candidate is used, a stock line stands in rather than a repeat. Emotion
descriptions and viewpoints are annotations rather than speech: they prefer unused ones and
reuse the least recently used when all are spent.

Emotion descriptions are retrieved by sign (distressing vs positive feeling) and attitudes
are chosen by stance value, so that re-extracting the state from a simulated row gives back
(approximately) the simulated distress and stance.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from rescue_env.data.schema import THERAPIST, Dialogue, Row
from rescue_env.dynamics.base import TO_GROUP, TO_THERAPIST
from rescue_env.dynamics.speakers import KIN, OFFSPRING, REFLEXIVE, UNKNOWN, Speaker, cast_of, pronoun_gender
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
#: short neutral lines per utterance type: no names, kin words or third-person pronouns, so
#: they fit anyone; used only when retrieval has nothing unused left
_STOCK_CLIENT: dict[str, list[str]] = {
    "accusation": ["That's not fair.", "You always do this.", "This keeps happening, and it's not on me.", "You never listen."],
    "defense": ["That's not what happened.", "I was trying my best.", "I don't see it that way.", "That's not fair to me."],
    "withdrawal": ["I don't know.", "I don't want to talk about it.", "Fine.", "Whatever."],
    "repair": ["I'm sorry. I want this to work.", "Can we start again?", "I don't want to fight.", "I hear you."],
    "validation": ["That makes sense.", "I get that.", "You're right about that.", "I can see why that hurt."],
    "disclosure": ["It's been really hard for me.", "I feel scared about all of this.", "I haven't said this before.", "I'm tired."],
    "reflection": ["Maybe I do that too.", "I hadn't thought of it like that.", "I think there's something in that.", "I keep coming back to that."],
    "recollection": ["It was like this before, too.", "I remember how it used to be.", "It started a long time ago.", "That reminds me of last year."],
    "request": ["I need you to hear me.", "Can we try something different?", "I just want some help.", "Please, just listen."],
    "other": ["Okay.", "Right.", "Yeah.", "Mm."],
}
_STOCK_THERAPIST = [
    "Let's slow down for a moment.",
    "What's happening for you right now?",
    "Can you say more about that?",
    "I'd like to hear from each of you on this.",
    "I notice something shifting in the room.",
    "Let's stay with that for a moment.",
    "Take your time.",
    "What would you like to happen here?",
    "That sounds important.",
    "I'm hearing a lot of feeling in that.",
    "What do you notice as you say that?",
    "Let's pause and take a breath.",
    "How is it to hear that?",
    "Can we look at what just happened between you?",
    "I want to make sure everyone gets heard.",
    "What do you need right now?",
    "Say a little more, if you can.",
    "That took some courage to say.",
    "Let's try to stay with one thing at a time.",
    "What's the feeling underneath that?",
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
#: back-off levels of client-line retrieval, most specific first (see the module docstring)
CLIENT_BACKOFF: tuple[tuple[str, ...], ...] = (
    ("role", "gender", "to", "sign"),
    ("role", "gender", "to"),
    ("role", "gender", "to_kind"),
    ("role", "gender"),
    ("role",),
    (),
)


def attitude_for(stance: float) -> str:
    """An attitude phrase whose lexicon valence matches a stance value."""
    for bound, text in _ATTITUDES:
        if stance < bound:
            return text
    return _ATTITUDES[-1][1]


def tone_for(utterance_type: str) -> str:
    return _TONES.get(utterance_type, "neutral")


# kinship requirements of a text ------------------------------------------------------------
_OFFSPRING = "|".join(sorted(OFFSPRING, key=len, reverse=True))
_SPOUSE = {"husband": "male", "boyfriend": "male", "wife": "female", "girlfriend": "female"}
_PARENT_WORDS = "|".join(sorted((w for w, (_, r) in KIN.items() if r == "parent"), key=len, reverse=True))
_MY_OFFSPRING = re.compile(r"\bmy\s+(?:own\s+)?(?:" + _OFFSPRING + r")\b", re.I)
_MY_SPOUSE = re.compile(r"\bmy\s+(husband|wife|boyfriend|girlfriend)\b", re.I)
_YOUR_OFFSPRING = re.compile(r"\byour\s+(?:own\s+)?(?:" + _OFFSPRING + r")\b", re.I)
_YOUR_SPOUSE = re.compile(r"\byour\s+(husband|wife|boyfriend|girlfriend)\b", re.I)
_VOCATIVE = re.compile(r"(?:^|[.!?]\s+|,\s*)(mum|mom|mummy|mommy|mama|dad|daddy)\s*(?:[,.!?]|$)", re.I)
_I_AM_PARENT = re.compile(r"\b(?:i'?m|i am|as)\s+(?:his|her|your|their|a)\s+(" + _PARENT_WORDS + r"|husband|wife)\b", re.I)
_POSS_KIN = re.compile(r"\b(his|her)\s+(?:own\s+)?(" + _OFFSPRING + r"|husband|wife|boyfriend|girlfriend)\b", re.I)
_HE = re.compile(r"\b(he|him|his|himself|he's|he'd|he'll)\b", re.I)
_SHE = re.compile(r"\b(she|her|hers|herself|she's|she'd|she'll)\b", re.I)


@dataclass(frozen=True, slots=True)
class Kinship:
    """What a text's kinship words and pronouns require of the people it is given to.

    ``speaker_*`` constrain the one who says (or, for emotion descriptions, feels) it;
    ``addressee_*`` the member it is said to; ``partner_gender`` the gender of the other
    partner in a two-person couple (the one "she"/"my husband" points at)."""

    speaker_not_child: bool = False
    speaker_parent: bool = False  # "I'm his mum"
    speaker_gender: str | None = None
    addressee_parent_gender: str | None = None  # a vocative "Mum,": the addressee is that parent
    addressee_not_child: bool = False
    partner_gender: str | None = None

    @staticmethod
    def of(text: str, kind: str) -> Kinship:
        """Requirements of ``text`` read as ``kind``: ``"line"`` (said by the speaker to the
        addressee), ``"feeling"`` (an emotion description of the speaker) or ``"view"`` (a
        viewpoint about the addressee)."""
        req: dict[str, object] = {}
        partner: set[str] = set()
        if kind == "line":
            if _MY_OFFSPRING.search(text):
                req["speaker_not_child"] = True
            for m in _MY_SPOUSE.finditer(text):
                req["speaker_not_child"] = True
                partner.add(_SPOUSE[m.group(1).lower()])
            m = _VOCATIVE.search(text)
            if m:
                req["addressee_parent_gender"] = KIN[m.group(1).lower()][0]
            m = _I_AM_PARENT.search(text)
            if m:
                word = m.group(1).lower()
                req["speaker_gender"] = _SPOUSE.get(word) or KIN[word][0]
                req["speaker_parent" if word not in _SPOUSE else "speaker_not_child"] = True
            if _YOUR_OFFSPRING.search(text):
                req["addressee_not_child"] = True
            for m in _YOUR_SPOUSE.finditer(text):
                req["addressee_not_child"] = True
            # third-person pronouns of a line point at someone not addressed: in a two-person
            # couple that is mostly the partner
            he, she = bool(_HE.search(text)), bool(_SHE.search(text))
            if he != she:
                partner.add("male" if he else "female")
        elif kind == "feeling":
            genders = {pronoun_gender(m.group(1)) for m in REFLEXIVE.finditer(text)}
            for m in _POSS_KIN.finditer(text):
                genders.add(pronoun_gender(m.group(1)))  # "his son": his = the feeler
                word = m.group(2).lower()
                req["speaker_not_child"] = True
                if word in _SPOUSE:
                    partner.add(_SPOUSE[word])
            if len(genders) == 1:
                req["speaker_gender"] = genders.pop()
            elif genders:
                req["speaker_gender"] = "contradiction"
        elif kind == "view":
            he, she = bool(_HE.search(text)), bool(_SHE.search(text))
            if he != she:
                partner.add("male" if he else "female")
        if len(partner) == 1:
            req["partner_gender"] = partner.pop()
        elif partner:
            req["partner_gender"] = "contradiction"
        return Kinship(**req)  # type: ignore[arg-type]


def _clash(known: str, required: str | None) -> bool:
    return required is not None and known != UNKNOWN and known != required


def line_fits(kin: Kinship, speaker: Speaker, addressee: Speaker | None, partner: Speaker | None, *, view: bool = False) -> bool:
    """Whether a text with requirements ``kin`` fits: said (or felt) by ``speaker`` to
    ``addressee`` (``None``: the therapist or the group), with ``partner`` the one other
    partner of a two-person couple (``None`` otherwise: the check is skipped). For a
    viewpoint (``view``) the pronouns point at the addressee, the viewpoint's target.
    Unknown roles and genders never clash."""
    if "contradiction" in (kin.speaker_gender, kin.partner_gender):
        return False
    if kin.speaker_not_child and speaker.role == "child":
        return False
    # "I'm his mum": a partner in a couple may be a parent too (of a child not in the room)
    if kin.speaker_parent and speaker.role == "child":
        return False
    if _clash(speaker.gender, kin.speaker_gender):
        return False
    if kin.addressee_parent_gender is not None:
        if addressee is None or addressee.role != "parent" or _clash(addressee.gender, kin.addressee_parent_gender):
            return False
        if speaker.role == "partner":
            return False
    if kin.addressee_not_child and addressee is not None and addressee.role == "child":
        return False
    about = addressee if view else partner
    if about is not None and _clash(about.gender, kin.partner_gender):
        return False
    return True


# proper names ------------------------------------------------------------------------------
_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]+")
_SENTENCE_START = re.compile(r"(?:^|[.!?\"'(\-]\s*|\.\.\.\s*)$")
#: capitalised words that are not people's names
_NOT_NAMES = frozenset(
    "i i'm i've i'd i'll ok okay mum mom dad mummy daddy god christmas easter monday tuesday wednesday thursday friday saturday "
    "sunday january february march april may june july august september october november december english therapist couple family "
    "mr mrs ms dr".split()
)


def _name_lexicon(dialogues: Sequence[Dialogue]) -> frozenset[str]:
    """Lower-cased words that name someone or something in the corpus: participants, people
    the annotations mention, and words written capitalised mid-sentence that never appear in
    lower case (so "Anaya", "Carver" count; a capitalised "Liked" from a transcription does
    not when "liked" appears elsewhere)."""
    names: set[str] = set()
    lower: set[str] = set()
    capital: set[str] = set()
    for d in dialogues:
        names.update(n.lower() for n in (*d.participants, *d.mentioned) if n)
        for r in d.rows:
            text = r.dialogue_cleaned or ""
            for m in _WORD.finditer(text):
                w = m.group(0)
                if w[0].islower():
                    lower.add(w.lower())
                elif not _SENTENCE_START.search(text[: m.start()]):
                    capital.add(w.lower().removesuffix("'s"))
    return frozenset(names | (capital - lower)) - _NOT_NAMES


# the corpus --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Entry:
    """One retrievable text: names as ``{m<k>}`` (slot k of the source's participants)."""

    template: str
    source: int  # index of the source dialogue in the bank
    slot: int | None  # the source slot of its speaker / feeler / viewpoint holder
    to_slot: int | None  # the source slot it was addressed to (or the viewpoint's target)
    to_slots: tuple[int, ...]  # the source slots a therapist line addressed, in order
    slots: tuple[int, ...]  # source slots it names
    foreign: frozenset[str]  # names in it from its source's world (not participants)
    kin: Kinship


def _to_key(addressee: Speaker | None, kind: str) -> str:
    return kind if addressee is None else f"member:{addressee.role}:{addressee.gender}"


class _Source:
    """One source dialogue of a :class:`TextBank`: its members' slots and cast, and how its
    texts become templates (names as ``{m<k>}``)."""

    def __init__(self, k: int, d: Dialogue, lexicon_re: re.Pattern[str] | None):
        self.k = k
        self.names = [n for n in d.participants if n]
        self.cast = cast_of(d)
        self.index = {n.lower(): i for i, n in enumerate(self.names)}
        self.pattern = re.compile(r"\b(" + "|".join(re.escape(n) for n in self.names) + r")\b", re.I) if self.names else None
        self.own = {n.lower() for n in (*self.names, *d.mentioned)}
        self.lexicon_re = lexicon_re

    def entry(self, text: str, kind: str, slot: int | None, to_slot: int | None, to_slots: tuple[int, ...] = ()) -> _Entry:
        text = text.replace("{", "(").replace("}", ")")
        if self.pattern is not None:
            text = self.pattern.sub(lambda m: "{m%d}" % self.index[m.group(1).lower()], text)
        slots = tuple(sorted({int(s) for s in re.findall(r"\{m(\d+)\}", text)}))
        found = {m.group(1).lower() for m in self.lexicon_re.finditer(text)} if self.lexicon_re else set()
        return _Entry(text, self.k, slot, to_slot, to_slots, slots, frozenset(found - self.own - set(self.index)), Kinship.of(text, kind))


class TextBank:
    """Retrieval corpus built from dialogues (see the module docstring); an empty bank falls
    back to stock lines. Build one per data set (it is cached by the envs) and start an
    :class:`EpisodeText` per episode with :meth:`episode`."""

    def __init__(self, dialogues: Sequence[Dialogue] = ()):
        self.dialogues = list(dialogues)
        self.casts: list[tuple[Speaker, ...]] = []
        self.lexicon = _name_lexicon(self.dialogues)
        self._lexicon_re = re.compile(r"\b(" + "|".join(re.escape(w) for w in sorted(self.lexicon, key=len, reverse=True)) + r")\b", re.I) if self.lexicon else None
        #: (utterance type, *condition values of a back-off level) -> entries
        self.client: dict[tuple, list[_Entry]] = defaultdict(list)
        #: (strategy,) or (strategy, focus role, focus gender) -> entries
        self.therapist: dict[tuple, list[_Entry]] = defaultdict(list)
        #: (sign,), (sign, role), (sign, role, gender) -> emotion descriptions
        self.feelings: dict[tuple, list[_Entry]] = defaultdict(list)
        #: (sign,), (sign, target gender) -> viewpoints
        self.views: dict[tuple, list[_Entry]] = defaultdict(list)
        self._seen: set[tuple] = set()
        for k, d in enumerate(self.dialogues):
            source = _Source(k, d, self._lexicon_re)
            self.casts.append(tuple(source.cast[n] for n in source.names))
            for r in d.rows:
                self._add_row(source, r)

    def _add(self, table: dict[tuple, list[_Entry]], keys: list[tuple], e: _Entry) -> None:
        # the same text from the same speaker cell once: repeats in the source would
        # otherwise weigh a line up and make a repeat look like a fresh choice
        for key in keys:
            if (id(table), key, e.template) not in self._seen:
                self._seen.add((id(table), key, e.template))
                table[key].append(e)

    def _add_row(self, src: _Source, r: Row) -> None:
        """File one row's line (therapist or client), feelings and viewpoints."""
        slot = src.index.get(r.primary_speaker.lower()) if r.primary_speaker else None
        single = r.target[0] if len(r.target) == 1 else None
        to_slot = src.index.get(single.lower()) if single else None
        text = r.dialogue_cleaned
        if text and r.is_therapist and r.strategy:
            self._add_therapist_line(src, r, text, to_slot)
        elif text and slot is not None and r.utterance_type:
            self._add_client_line(src, r, text, slot, to_slot, single)
        for emo in r.internal_emotion:
            who = src.index.get(emo.person.lower()) if emo.person else None
            if who is None:
                continue
            w = negativity_weight(emo.emotion_description)
            sign = "neg" if w >= 0.95 else "pos" if w <= 0.05 else None
            if sign is None:
                continue
            me = src.cast[src.names[who]]
            e = src.entry(emo.emotion_description, "feeling", who, None)
            self._add(self.feelings, [(sign,), (sign, me.role), (sign, me.role, me.gender)], e)
        for v in r.viewpoints_attitudes:
            holder = src.index.get(v.source.lower()) if v.source else None
            target = src.index.get(v.target.lower()) if v.target else None
            if holder is None:
                continue
            sign = "neg" if valence(v.attitude) < 0 else "pos"
            e = src.entry(v.viewpoint, "view", holder, target)
            tg = src.cast[src.names[target]].gender if target is not None else UNKNOWN
            self._add(self.views, [(sign,), (sign, tg)], e)

    def _add_therapist_line(self, src: _Source, r: Row, text: str, to_slot: int | None) -> None:
        """A therapist line, under its strategy and the member (or some, or the group) it addressed."""
        addressed = tuple(src.index[t.lower()] for t in r.target if t and t.lower() in src.index)
        e = src.entry(text, "line", None, to_slot, addressed)
        keys = [(r.strategy,)]
        if to_slot is not None:
            focus = src.cast[src.names[to_slot]]
            keys += [(r.strategy, focus.role, focus.gender), (r.strategy, focus.role, UNKNOWN), (r.strategy, UNKNOWN, focus.gender)]
        elif 1 < len(addressed) < len(src.names):
            keys.append((r.strategy, "some"))
        else:
            keys.append((r.strategy, "group"))
        self._add(self.therapist, keys, e)

    def _add_client_line(self, src: _Source, r: Row, text: str, slot: int, to_slot: int | None, single: str | None) -> None:
        """A client line, under every back-off level of its speaker, addressee and feeling."""
        me = src.cast[src.names[slot]]
        if single == THERAPIST:
            to, kind = "therapist", "therapist"
        elif to_slot is not None and to_slot != slot:
            to, kind = _to_key(src.cast[src.names[to_slot]], "member"), "member"
        else:
            to, kind = "group", "group"
        feel = next((e for e in r.internal_emotion if e.person == r.primary_speaker), None)
        sign = UNKNOWN if feel is None else "neg" if negativity_weight(feel.emotion_description) >= 0.5 else "pos"
        e = src.entry(text, "line", slot, to_slot if kind == "member" else None)
        cells = {"role": me.role, "gender": me.gender, "to": to, "to_kind": kind, "sign": sign}
        keys = [(r.utterance_type, level, tuple(cells[c] for c in level)) for level in CLIENT_BACKOFF]
        self._add(self.client, keys, e)

    def episode(self, dialogue: Dialogue, members: Sequence[str], seed: int) -> EpisodeText:
        """The text state of one episode on ``dialogue`` with ``members`` (see :class:`EpisodeText`)."""
        return EpisodeText(self, dialogue, members, seed)

    def world_of(self, dialogue: Dialogue) -> frozenset[str]:
        """Lower-cased names that belong to ``dialogue``'s world: its participants, the people
        its annotations mention, and the corpus names its own lines use (an absent stepfather
        of this family may be named in its episodes; another family's may not)."""
        words = {n.lower() for n in (*dialogue.participants, *dialogue.mentioned) if n}
        if self._lexicon_re is not None:
            for r in dialogue.rows:
                words.update(m.group(1).lower() for m in self._lexicon_re.finditer(r.dialogue_cleaned or ""))
        return frozenset(words)


@dataclass
class EpisodeText:
    """One episode's text choices: retrieval fitted to this group, no verbatim repeat.

    Draws come from its own generator (seeded with the episode's text seed), so recording a
    transcript never changes the episode, and the same seed gives the same text.
    :attr:`stats` counts ``retrieved`` and ``stock`` lines, ``stock_repeat`` (a stock line
    said again because every candidate and every stock line was used), and ``level<k>``, the
    back-off level each retrieved client line came from."""

    bank: TextBank
    dialogue: Dialogue
    members: Sequence[str]
    seed: int
    stats: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.members = list(self.members)
        self.rng = np.random.default_rng(self.seed)
        cast = cast_of(self.dialogue)
        self.cast = [cast.get(n, Speaker(n, "partner" if self.dialogue.scenario == "couple" else UNKNOWN)) for n in self.members]
        self.world = self.bank.world_of(self.dialogue)
        self.said: set[str] = set()
        self._annotation_uses: Counter = Counter()

    # helpers -------------------------------------------------------------------------------
    def _partner(self, speaker: int) -> Speaker | None:
        """The other partner of a two-person couple (the person "she"/"my husband" means)."""
        if self.dialogue.scenario != "couple" or len(self.cast) != 2:
            return None
        return self.cast[1 - speaker]

    def _assign(self, e: _Entry, fixed: dict[int, int]) -> dict[int, int] | None:
        """Source slot -> member index for the slots ``e`` names, keeping ``fixed`` and giving
        the other source people the unused members of the closest role and gender; ``None``
        when the group is too small (never wrap a name onto the wrong person)."""
        out = dict(fixed)
        taken = set(fixed.values())
        source_cast = self.bank.casts[e.source]
        for s in e.slots:
            if s in out:
                continue
            if s >= len(source_cast):
                return None
            want = source_cast[s]
            free = [i for i in range(len(self.cast)) if i not in taken]
            if not free:
                return None
            best = max(free, key=lambda i: (self.cast[i].role == want.role) + (self.cast[i].gender == want.gender) - 0.01 * i)
            out[s] = best
            taken.add(best)
        return out

    def _fill(self, e: _Entry, mapping: dict[int, int]) -> str:
        return re.sub(r"\{m(\d+)\}", lambda m: self.members[mapping[int(m.group(1))]], e.template)

    def _pick(self, pool: list[_Entry], fits, fixed_of, *, spoken: bool) -> str | None:
        """A uniformly drawn entry of ``pool`` that fits and (for speech) was not said."""
        options: list[str] = []
        for e in pool:
            if e.foreign and not e.foreign <= self.world:
                continue
            if not fits(e):
                continue
            mapping = self._assign(e, fixed_of(e))
            if mapping is None:
                continue
            text = self._fill(e, mapping)
            if spoken and text in self.said:
                continue
            options.append(text)
        if not options:
            return None
        if not spoken:
            # annotations: least used first, then a random one among those
            low = min(self._annotation_uses[t] for t in options)
            options = [t for t in options if self._annotation_uses[t] == low]
        return options[int(self.rng.integers(len(options)))]

    def _stock(self, lines: list[str]) -> str:
        unused = [s for s in lines if s not in self.said]
        if unused:
            self.stats["stock"] += 1
            return unused[int(self.rng.integers(len(unused)))]
        self.stats["stock_repeat"] += 1
        return lines[int(self.rng.integers(len(lines)))]

    # the four kinds of text ----------------------------------------------------------------
    def client_line(self, utterance_type: str, speaker: int, addressee: int, distress: float) -> str:
        """The words of ``members[speaker]``'s turn of ``utterance_type`` to ``addressee`` (a
        member index, :data:`TO_THERAPIST` or :data:`TO_GROUP`) while their distress is
        ``distress`` (the emotion sign: distressed from 0.15, as :meth:`emotion`)."""
        me = self.cast[speaker]
        to_member = addressee >= 0
        other = self.cast[addressee] if to_member else None
        kind = "member" if to_member else "therapist" if addressee == TO_THERAPIST else "group"
        cells = {
            "role": me.role,
            "gender": me.gender,
            "to": _to_key(other, kind),
            "to_kind": kind,
            "sign": "neg" if distress >= 0.15 else "pos",
        }
        partner = self._partner(speaker)

        def fits(e: _Entry) -> bool:
            # roles are never crossed, even at the last level: a parent's "I come back from
            # work tired" does not become a child's line (a source of unknown role may serve)
            source_role = self.bank.casts[e.source][e.slot].role if e.slot is not None else UNKNOWN
            if UNKNOWN not in (me.role, source_role) and source_role != me.role:
                return False
            return line_fits(e.kin, me, other, partner)

        def fixed_of(e: _Entry) -> dict[int, int]:
            fixed = {e.slot: speaker} if e.slot is not None else {}
            if e.to_slot is not None and to_member and e.to_slot != e.slot:
                fixed[e.to_slot] = addressee
            return fixed

        tried: set[tuple] = set()
        for k, level in enumerate(CLIENT_BACKOFF):
            # an unknown value is no constraint: look that level up without it
            values = tuple(cells[c] for c in level)
            if any(UNKNOWN in v.split(":") for v in values):
                continue
            key = (utterance_type, level, values)
            if key in tried:
                continue
            tried.add(key)
            text = self._pick(self.bank.client.get(key, []), fits, fixed_of, spoken=True)
            if text is not None:
                self.said.add(text)
                self.stats["retrieved"] += 1
                self.stats[f"level{k}"] += 1
                return text
        text = self._stock(_STOCK_CLIENT.get(utterance_type, _STOCK_CLIENT["other"]))
        self.said.add(text)
        return text

    def therapist_line(self, strategy: str, addressed: Sequence[int] = ()) -> str:
        """A line for the therapist's ``strategy`` move to the members ``addressed`` (one, some,
        or all / none for the group): the people the source line addressed become these, in
        order, so "Mei, what happens for you…" goes to the right person."""
        addressed = list(addressed)
        focus = addressed[0] if len(addressed) == 1 else None
        other = self.cast[focus] if focus is not None else None
        partner = self._partner(focus) if focus is not None else None
        nobody = Speaker(THERAPIST, "other", UNKNOWN)

        def fits(e: _Entry) -> bool:
            return line_fits(e.kin, nobody, other, partner)

        def fixed_of(e: _Entry) -> dict[int, int]:
            if len(e.to_slots) == len(addressed) and len(addressed) < len(self.members):
                return dict(zip(e.to_slots, addressed))
            return {}

        if other is not None:
            keys = [(strategy, other.role, other.gender), (strategy, other.role, UNKNOWN), (strategy, UNKNOWN, other.gender), (strategy,)]
        elif 1 < len(addressed) < len(self.members):
            keys = [(strategy, "some"), (strategy,)]
        else:
            keys = [(strategy, "group"), (strategy,)]
        for key in keys:
            text = self._pick(self.bank.therapist.get(key, []), fits, fixed_of, spoken=True)
            if text is not None:
                self.said.add(text)
                self.stats["retrieved"] += 1
                return text
        text = self._stock(_STOCK_THERAPIST)
        self.said.add(text)
        return text

    def emotion(self, distress: float, speaker: int) -> tuple[str, int]:
        """An emotion description of ``members[speaker]`` and a 1-10 intensity whose
        extracted distress ≈ ``distress``."""
        if distress < 0.15:
            sign, intensity, fallback = "pos", int(self.rng.integers(4, 8)), _FALLBACK_POSITIVE
        else:
            sign, intensity, fallback = "neg", int(min(10, max(1, round(distress * 10)))), _FALLBACK_NEGATIVE
        me = self.cast[speaker]
        partner = self._partner(speaker)
        keys = [(sign, me.role, me.gender), (sign, me.role), (sign,)]
        for key in keys:
            text = self._pick(self.bank.feelings.get(key, []), lambda e: line_fits(e.kin, me, None, partner), lambda e: {e.slot: speaker}, spoken=False)
            if text is not None:
                break
        else:
            text = fallback[int(self.rng.integers(len(fallback)))]
        self._annotation_uses[text] += 1
        return text, intensity

    def viewpoint(self, stance: float, speaker: int, target: int) -> str:
        """A viewpoint of ``members[speaker]`` about ``members[target]`` for a stance value."""
        sign = "neg" if stance < 0 else "pos"
        me, them = self.cast[speaker], self.cast[target]

        def fixed_of(e: _Entry) -> dict[int, int]:
            fixed = {e.slot: speaker} if e.slot is not None else {}
            if e.to_slot is not None and e.to_slot != e.slot:
                fixed[e.to_slot] = target
            return fixed

        for key in [(sign, them.gender), (sign,)]:
            text = self._pick(self.bank.views.get(key, []), lambda e: line_fits(e.kin, me, them, None, view=True), fixed_of, spoken=False)
            if text is not None:
                break
        else:
            text = "has mixed feelings about them"
        self._annotation_uses[text] += 1
        return text
