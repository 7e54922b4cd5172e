"""Instance builders for the six RESCUE-BENCH tasks, in two profiles.

An *instance* is one question a predictor answers and one gold answer it is scored against.
:func:`build_instances` turns any list of :class:`~rescue_env.data.Dialogue` (the full
release, the per-sample directory layout, the bundled seeds, simulated episodes with extra
per-row columns) into the instances of one task.

Profiles (``docs/PROTOCOL.md``):

``paper`` (default)
    The paper's protocol with the released scripts' defects fixed. Instance sets equal the
    released ones except: RPP covers every row with a non-empty relation label
    (``Row.relation_label``), predicted from prior rows only, in the sample's own taxonomy,
    with out-of-taxonomy gold labels excluded and counted; STP/SSP targets keep dyads of a
    larger family (``"Helen & Joan"``) instead of collapsing them to ``"Family"``, the
    candidate targets are the sample's individuals, dyads and group (not the targets of later
    therapist rows), and names that are not clients are dropped from targets.
``released``
    The released scripts' instance sets one for one: strict per-sample 1:1 ITP balancing
    with even sampling (round-half-to-even), therapist-only RPP on ``relation_cycle_state``
    with gold labels unchecked against the taxonomy, dyads collapsed to the group label and
    candidates gathered from every therapist row, ER's 30 % early cutoff.

Both profiles share ER and VP instance sets (the paper's counts, 926 and 855 checkpoints,
are those of the sampling rules) and the ITP instance set (the paper's 2,722 + 284 are
balanced counts). Neither profile ever shows a predictor the gold label or anything derived
from it (ITP's candidate and boundary types are kept in :attr:`Instance.meta`, which
predictors must not read).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any, Literal, Sequence, TypeVar

from rescue_env.data.schema import GROUP_LABELS, THERAPIST, Dialogue, Row
from rescue_env.taxonomy.labels import patterns, strategies

Profile = Literal["paper", "released"]
PROFILES: tuple[str, ...] = ("paper", "released")
TASKS: tuple[str, ...] = ("itp", "rpp", "stp", "ssp", "er", "vp")
#: Tasks whose answers are free text scored by a judge (need a generative predictor).
GENERATIVE_TASKS: frozenset[str] = frozenset({"er", "vp"})

#: Speakers that are not a client (ER and VP only ask about clients).
NON_CLIENT_SPEAKERS = frozenset({THERAPIST, "Couple", "Family", ""})

#: Context windows of the released scripts' defaults (rows before the instance's row).
CONTEXT_SIZE: dict[str, int] = {"itp": 3, "rpp": -1, "stp": 3, "ssp": 3, "er": 3, "vp": 3}
#: Checkpoints per sample for ER and VP (``--checkpoints-per-sample``).
CHECKPOINTS_PER_SAMPLE = 5
#: ER's minimum number of ``[A-Za-z0-9']+`` words in the utterance.
ER_MIN_WORDS = 5
#: ER's early cutoff: the first ceil(30 % of rows) rows are never checkpoints.
ER_CUTOFF_FRACTION = 0.3

_WORD = re.compile(r"[A-Za-z0-9']+")
T = TypeVar("T")


@dataclass
class Instance:
    """One question of one task.

    ``row`` is the 1-based *position* of the instance's row in ``dialogue.rows`` (ITP: the
    decision row after which the therapist may speak; other tasks: the row whose label is
    asked); ``row_index`` is that row's own ``row_index`` from the data (used in ids).
    ``gold`` is the answer: ITP ``"yes"``/``"no"``; RPP a pattern label; STP a target label;
    SSP a strategy label; ER ``{"emotion", "intensity"}``; VP a list of
    ``{"source", "target", "viewpoint", "attitude"}``. ``candidates`` are the labels a
    ranking task chooses from (RPP taxonomy, STP targets, SSP strategies). ``context`` holds
    what a predictor may see beyond the rows (participants, the known target of SSP, the
    speaker of ER/VP). ``meta`` holds bookkeeping a predictor must never read (it can carry
    the gold label in another form).
    """

    id: str
    task: str
    profile: str
    sample_id: str
    scenario: str
    row: int
    row_index: int
    gold: Any
    candidates: list[str] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    dialogue: Dialogue | None = field(default=None, repr=False, compare=False)

    def prior_rows(self, k: int | None = None) -> list[Row]:
        """Rows strictly before this instance's row: the last ``k`` of them (``-1``/``None``:
        all, ``0``: none). ITP counts its decision row as the latest prior row, since the
        question is whether to speak *after* it."""
        if self.dialogue is None:
            return []
        end = self.row if self.task == "itp" else self.row - 1
        if k is None or k < 0:
            start = 0
        elif k == 0:
            return []
        else:
            start = max(0, end - k)
        return list(self.dialogue.rows[start:end])

    @property
    def current_row(self) -> Row | None:
        """The instance's own row (ITP: the decision row)."""
        if self.dialogue is None:
            return None
        return self.dialogue.rows[self.row - 1]


@dataclass
class InstanceSet:
    """The instances of one task and profile, and what was left out and why
    (``excluded`` maps a reason to a count, e.g. ``{"out_of_taxonomy": 3}``)."""

    task: str
    profile: str
    instances: list[Instance]
    excluded: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.instances)

    def __iter__(self):
        return iter(self.instances)

    def __getitem__(self, i):
        return self.instances[i]

    def __reversed__(self):
        return reversed(self.instances)

    def counts(self) -> dict[str, int]:
        """Instance counts per scenario (``{"couple": n, "family": m}``; zero counts kept)."""
        out = {"couple": 0, "family": 0}
        for inst in self.instances:
            _tally(out, inst.scenario)
        return out


# ---------------------------------------------------------------------------------------------
# shared helpers


def _check_name(value: str, kind: str, allowed: Sequence[str]) -> str:
    name = str(value).strip().lower()
    if name not in allowed:
        raise ValueError(f"unknown {kind} {value!r}: expected one of {list(allowed)}")
    return name


def check_task(task: str) -> str:
    """``task`` lower-cased; ``ValueError`` naming the six tasks when unknown."""
    return _check_name(task, "task", TASKS)


def check_profile(profile: str) -> str:
    """``profile`` lower-cased; ``ValueError`` naming the profiles when unknown."""
    return _check_name(profile, "profile", PROFILES)


def clean(value: Any) -> str:
    """The released scripts' cleaning: ``str(v or "").strip()``."""
    return str(value or "").strip()


def even_sample(items: Sequence[T], limit: int, *, single: Literal["middle", "first"] = "middle") -> list[T]:
    """``limit`` items spread evenly over ``items``, in input order, deterministic.

    Positions ``round(r * (n - 1) / (limit - 1))`` for ``r = 0..limit-1`` with Python's
    round-half-to-even (n = 10, limit = 5 → 0, 2, 4, 7, 9). Everything is kept when
    ``limit <= 0`` or ``n <= limit``. With ``limit == 1`` ITP takes the middle item
    (``single="middle"``) and ER/VP the first (``single="first"``).
    """
    n = len(items)
    if limit <= 0 or n <= limit:
        return list(items)
    if limit == 1:
        return [items[n // 2] if single == "middle" else items[0]]
    return [items[round(r * (n - 1) / (limit - 1))] for r in range(limit)]


def word_count(text: str) -> int:
    """Number of ``[A-Za-z0-9']+`` words (ER's minimum-length rule)."""
    return len(_WORD.findall(text or ""))


def round_intensity(value: Any) -> int | None:
    """``int(round(float(x)))`` (round-half-to-even) when it parses, else ``None``."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    if math.isnan(f) or math.isinf(f):
        return None
    return int(round(f))


def _tally(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def _dedupe(items: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


# ---------------------------------------------------------------------------------------------
# targets


def canonical_target(values: Sequence[Any]) -> tuple[str, ...]:
    """Released rule: clean each value, drop empties and ``"Therapist"``; order and duplicates
    kept."""
    return tuple(v for v in (clean(x) for x in values) if v and v != THERAPIST)


def released_target_label(target: tuple[str, ...], group_label: str) -> str:
    """Released rule: ``""`` for no target, the element for one (even a group label or a
    non-client), the group label for two or more (dyads collapse)."""
    if not target:
        return ""
    if len(target) == 1:
        return target[0]
    return group_label


def dyad_label(names: Sequence[str]) -> str:
    """Label of a subgroup of two: ``"A & B"`` (names in participant order)."""
    return " & ".join(names)


def paper_target_label(values: Sequence[Any], dialogue: Dialogue) -> str:
    """Paper rule for a target list: ``""`` when no client is addressed; else the client's
    name, a dyad label ``"A & B"`` for two of a group of three or more, or the group label
    when the list names the group or covers everyone. Larger subgroups map to the group
    label (the coarsest option, as in :meth:`ActionEncoding.target_for_slots`); names that
    are not clients are dropped."""
    members = list(dialogue.participants)
    group = dialogue.group_label
    chosen: set[str] = set()
    for v in canonical_target(values):
        if v in GROUP_LABELS.values():
            if v == group:
                chosen.update(members)
        elif v in members:
            chosen.add(v)
    if not chosen:
        return ""
    if len(chosen) >= len(members) or len(chosen) > 2:
        return group
    ordered = [m for m in members if m in chosen]
    return ordered[0] if len(ordered) == 1 else dyad_label(ordered)


def paper_target_candidates(dialogue: Dialogue) -> list[str]:
    """Every client, every dyad (groups of three or more), then the group label."""
    members = list(dialogue.participants)
    out = list(members)
    if len(members) > 2:
        out.extend(dyad_label(pair) for pair in combinations(members, 2))
    out.append(dialogue.group_label)
    return out


def released_participants(dialogue: Dialogue) -> list[str]:
    """Released ``infer_participants``: speakers and targets in first-appearance order,
    skipping empties, ``Therapist``, ``Couple`` and ``Family`` (can include non-clients)."""
    out: list[str] = []
    for row in dialogue.rows:
        names = [row.primary_speaker, *row.target]
        for s in row.support_strategy:
            names.extend(s.target)
        for n in names:
            n = clean(n)
            if n and n not in NON_CLIENT_SPEAKERS and n not in out:
                out.append(n)
    return out


def released_target_candidates(dialogue: Dialogue, participants: Sequence[str]) -> list[str]:
    """Released candidate targets: participants, the group label, then every therapist row's
    target and strategy targets (whole sample, later rows included), deduplicated by tuple
    and then labelled, so the group label can repeat."""
    group = dialogue.group_label
    tuples: list[tuple[str, ...]] = [(p,) for p in participants]
    tuples.append((group,))
    for row in dialogue.rows:
        if row.primary_speaker != THERAPIST:
            continue
        tuples.append(tuple(row.target))
        for s in row.support_strategy:
            tuples.append(tuple(s.target))
    seen: set[tuple[str, ...]] = set()
    labels: list[str] = []
    for t in tuples:
        ct = canonical_target(t)
        if ct in seen:
            continue
        seen.add(ct)
        labels.append(released_target_label(ct, group))
    return labels or ["__empty__"]


def support_gold_target(row: Row, dialogue: Dialogue, profile: str) -> tuple[str, str]:
    """Gold target of a therapist row and where it came from: the first strategy item's
    target (``"support_strategy"``), else the row's target (``"row_target_fallback"``);
    ``("", "")`` when neither resolves."""
    first = row.support_strategy[0]
    for source, values in (("support_strategy", first.target), ("row_target_fallback", row.target)):
        if profile == "released":
            label = released_target_label(canonical_target(values), dialogue.group_label)
        else:
            label = paper_target_label(values, dialogue)
        if label:
            return label, source
    return "", ""


# ---------------------------------------------------------------------------------------------
# builders


def _iid(task: str, d: Dialogue, row: Row, suffix: str = "") -> str:
    # Internal ids name the sample and row only; predictors get opaque ids (never these).
    return f"{task}:{d.sample_id}#{suffix}{row.row_index}"


def _instance(
    task: str,
    profile: str,
    d: Dialogue,
    pos: int,
    row: Row,
    gold: Any,
    *,
    context: dict[str, Any],
    candidates: list[str] | None = None,
    meta: dict[str, Any] | None = None,
    suffix: str = "row",
) -> Instance:
    """The instance of ``task`` at ``row`` (1-based position ``pos`` in ``d.rows``)."""
    return Instance(
        id=_iid(task, d, row, suffix),
        task=task,
        profile=profile,
        sample_id=d.sample_id,
        scenario=d.scenario,
        row=pos,
        row_index=row.row_index,
        gold=gold,
        candidates=[] if candidates is None else candidates,
        context=context,
        meta={} if meta is None else meta,
        dialogue=d,
    )


def _speaker_context(d: Dialogue, row: Row) -> dict[str, Any]:
    """Context of a row-level question about the row's speaker (RPP, ER, VP)."""
    return {"participants": list(d.participants), "speaker": row.primary_speaker}


def _profile_participants(d: Dialogue, profile: str) -> list[str]:
    """The participants STP and SSP show: the released ``infer_participants`` or the sample's."""
    return released_participants(d) if profile == "released" else list(d.participants)


def build_itp(dialogues: Sequence[Dialogue], profile: str) -> InstanceSet:
    """ITP: after row d, should the therapist speak? Positives: d is a client row followed by
    a therapist row; negatives: neither d nor d+1 is a therapist row. Per sample, both
    classes are cut to the smaller one's size by even sampling (strict 1:1); a sample with
    an empty class gives nothing. Instances are sorted by d."""
    out: list[Instance] = []
    for d in dialogues:
        rows = d.rows
        is_t = [r.primary_speaker == THERAPIST for r in rows]
        pos: list[tuple[int, str, str]] = []
        neg: list[tuple[int, str, str]] = []
        for i in range(len(rows) - 1):  # i: 0-based decision row, i + 1 the next row
            if is_t[i + 1] and not is_t[i]:
                pos.append((i, "actual_therapist_entry", "therapist_entry"))
            elif not is_t[i] and not is_t[i + 1]:
                same = rows[i].primary_speaker == rows[i + 1].primary_speaker
                neg.append((i, "continue_listening", "same_speaker_continuation" if same else "non_therapist_exchange"))
        b = min(len(pos), len(neg))
        if b == 0:
            continue
        chosen = even_sample(pos, b) + even_sample(neg, b)
        chosen.sort(key=lambda c: c[0])  # stable: positives before negatives on equal d (never equal)
        for i, ctype, boundary in chosen:
            gold = "yes" if ctype == "actual_therapist_entry" else "no"
            out.append(
                _instance(
                    "itp",
                    profile,
                    d,
                    i + 1,
                    rows[i],
                    gold,
                    context={"participants": list(d.participants)},
                    meta={"candidate_type": ctype, "boundary_type": boundary},
                    suffix="after",
                )
            )
    return InstanceSet("itp", profile, out)


def build_rpp(dialogues: Sequence[Dialogue], profile: str) -> InstanceSet:
    """RPP: the relation pattern at a row, from the rows before it.

    ``paper``: every row with a non-empty ``Row.relation_label``; candidates are the
    sample's own taxonomy; out-of-taxonomy gold is excluded (counted in ``excluded``).
    ``released``: therapist rows with a non-empty ``relation_cycle_state``; gold kept even
    outside the taxonomy (always wrong, as in the scripts).
    """
    out: list[Instance] = []
    excluded: dict[str, int] = {}
    for d in dialogues:
        labels = list(patterns(d.scenario))
        for pos, row in enumerate(d.rows, start=1):
            if profile == "released":
                if row.primary_speaker != THERAPIST:
                    continue
                gold = clean(row.relation_cycle_state)
                if not gold:
                    continue
            else:
                gold = clean(row.relation_label)
                if not gold:
                    continue
                if gold not in labels:
                    _tally(excluded, "out_of_taxonomy")
                    continue
            out.append(_instance("rpp", profile, d, pos, row, gold, candidates=labels, context=_speaker_context(d, row)))
    return InstanceSet("rpp", profile, out, excluded)


def _support_rows(d: Dialogue):
    for pos, row in enumerate(d.rows, start=1):
        if row.primary_speaker != THERAPIST or not row.support_strategy:
            continue
        if not clean(row.support_strategy[0].strategy_type):
            continue
        yield pos, row


def build_stp(dialogues: Sequence[Dialogue], profile: str) -> InstanceSet:
    """STP: whom the therapist's support at a row is addressed to, from the rows before.

    Rows: therapist rows whose first strategy item has a strategy type (any value). Gold:
    that item's target, else the row's target (see :func:`support_gold_target`); rows with
    neither are skipped (counted in ``excluded["no_target"]``).
    """
    out: list[Instance] = []
    excluded: dict[str, int] = {}
    for d in dialogues:
        participants = _profile_participants(d, profile)
        if profile == "released":
            base = released_target_candidates(d, participants)
        else:
            base = paper_target_candidates(d)
        for pos, row in _support_rows(d):
            gold, source = support_gold_target(row, d, profile)
            if not gold:
                _tally(excluded, "no_target")
                continue
            cands = list(base)
            if gold not in cands:
                cands.append(gold)
            out.append(
                _instance(
                    "stp",
                    profile,
                    d,
                    pos,
                    row,
                    gold,
                    candidates=cands,
                    context={"participants": participants},
                    meta={"gold_source": source},
                )
            )
    return InstanceSet("stp", profile, out, excluded)


def build_ssp(dialogues: Sequence[Dialogue], profile: str) -> InstanceSet:
    """SSP: which strategy the therapist uses at a row, knowing whom it addresses.

    Rows: therapist rows whose first strategy item's type is in the sample's strategy set
    and whose target resolves as in STP. ``context["known_target"]`` is the gold target.
    """
    out: list[Instance] = []
    excluded: dict[str, int] = {}
    for d in dialogues:
        labels = list(strategies(d.scenario))
        participants = _profile_participants(d, profile)
        for pos, row in _support_rows(d):
            gold = clean(row.support_strategy[0].strategy_type)
            if gold not in labels:
                _tally(excluded, "out_of_taxonomy")
                continue
            target, source = support_gold_target(row, d, profile)
            if not target:
                _tally(excluded, "no_target")
                continue
            out.append(
                _instance(
                    "ssp",
                    profile,
                    d,
                    pos,
                    row,
                    gold,
                    candidates=labels,
                    context={"participants": participants, "known_target": target},
                    meta={"target_source": source},
                )
            )
    return InstanceSet("ssp", profile, out, excluded)


def _client_checkpoints(task: str, dialogues: Sequence[Dialogue], profile: str, gold_at) -> InstanceSet:
    """ER/VP: per sample, the client rows where ``gold_at(d, row)`` is not ``None`` (in row
    order), then :data:`CHECKPOINTS_PER_SAMPLE` of them by even sampling (first one when a
    single one is asked for)."""
    out: list[Instance] = []
    for d in dialogues:
        cands: list[tuple[int, Row, Any]] = []
        for pos, row in enumerate(d.rows, start=1):
            if row.primary_speaker in NON_CLIENT_SPEAKERS:
                continue
            gold = gold_at(d, row)
            if gold is not None:
                cands.append((pos, row, gold))
        for pos, row, gold in even_sample(cands, CHECKPOINTS_PER_SAMPLE, single="first"):
            out.append(_instance(task, profile, d, pos, row, gold, context=_speaker_context(d, row)))
    return InstanceSet(task, profile, out)


def _speaker_emotion(row: Row) -> dict[str, Any] | None:
    for e in row.internal_emotion:
        if clean(e.person) != row.primary_speaker or not clean(e.emotion_description):
            continue
        intensity = round_intensity(e.intensity)
        if intensity is None or not 0 <= intensity <= 10:
            continue
        return {"emotion": clean(e.emotion_description), "intensity": intensity}
    return None


def _er_cutoff(d: Dialogue) -> int:
    """ER's early cutoff: rows with ``row_index`` up to this are never checkpoints."""
    n_rows = len(d.rows)
    return 0 if n_rows <= 1 else min(n_rows - 1, math.ceil(ER_CUTOFF_FRACTION * n_rows))


def _er_gold(d: Dialogue, row: Row) -> dict[str, Any] | None:
    gold = _speaker_emotion(row)
    if gold is None or word_count(row.dialogue_cleaned) < ER_MIN_WORDS:
        return None
    if row.row_index <= _er_cutoff(d):
        return None
    return gold


def build_er(dialogues: Sequence[Dialogue], profile: str) -> InstanceSet:
    """ER: the speaker's inner emotion and its intensity (0-10) at a client row.

    Candidates: client rows with an ``internal_emotion`` item of the speaker (non-empty
    description, intensity 0-10 after rounding) and at least 5 words of speech, after an
    early cutoff of ``min(R - 1, ceil(0.3 R))`` rows (R = the sample's rows); then 5 per
    sample by even sampling.
    """
    return _client_checkpoints("er", dialogues, profile, _er_gold)


def _vp_gold(d: Dialogue, row: Row) -> list[dict[str, str]] | None:
    gold = [
        {"source": clean(v.source), "target": clean(v.target), "viewpoint": clean(v.viewpoint), "attitude": clean(v.attitude)}
        for v in row.viewpoints_attitudes
        if clean(v.source) == row.primary_speaker and clean(v.target) and clean(v.viewpoint)
    ]
    return gold or None


def build_vp(dialogues: Sequence[Dialogue], profile: str) -> InstanceSet:
    """VP: the speaker's viewpoints (toward whom, what) at a client row.

    Candidates: client rows with at least one ``viewpoints_attitudes`` item whose source is
    the speaker, with a target and a viewpoint (gold: all such items); then 5 per sample by
    even sampling. No word minimum, no cutoff.
    """
    return _client_checkpoints("vp", dialogues, profile, _vp_gold)


_BUILDERS = {"itp": build_itp, "rpp": build_rpp, "stp": build_stp, "ssp": build_ssp, "er": build_er, "vp": build_vp}


def build_instances(dialogues: Sequence[Dialogue], task: str, profile: str = "paper") -> InstanceSet:
    """The instances of ``task`` (``itp``, ``rpp``, ``stp``, ``ssp``, ``er``, ``vp``) under
    ``profile`` (``paper`` or ``released``) over ``dialogues``, in data order.

    Any dialogue the loader returns works, couple and family mixed; extra per-row columns
    (a simulated episode's ``state``) are ignored. Raises ``ValueError`` for an unknown task
    or profile.
    """
    t, p = check_task(task), check_profile(profile)
    return _BUILDERS[t](list(dialogues), p)


def count_instances(dialogues: Sequence[Dialogue], profile: str = "paper", tasks: Sequence[str] = TASKS) -> dict[str, dict[str, int]]:
    """``{task: {"couple": n, "family": m}}`` for a quick look at instance counts."""
    return {check_task(t): build_instances(dialogues, t, profile).counts() for t in tasks}
