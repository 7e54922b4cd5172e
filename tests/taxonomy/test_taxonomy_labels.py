"""Label sets and their definitions (DESIGN.md §3): names and orders are the benchmark's."""

from __future__ import annotations

import re

import pytest

from rescue_env.taxonomy import (
    COUPLE_PATTERNS,
    COUPLE_STRATEGIES,
    FAMILY_PATTERNS,
    FAMILY_STRATEGIES,
    UTTERANCE_TYPES,
    all_patterns,
    all_strategies,
    label_info,
    patterns,
    strategies,
)

EXPECTED = {
    ("couple", "pattern"): (
        "pursue_withdraw", "attack_attack", "withdraw_withdraw", "repair_softening",
        "constructive_alignment", "mixed_transition",
    ),
    ("family", "pattern"): (
        "escalation_conflict", "pursue_withdraw", "mutual_disengagement", "cross_generational_coalition",
        "boundary_hierarchy_strain", "repair_softening", "cooperative_family_alliance", "mixed_transition",
    ),
    ("couple", "strategy"): (
        "counterbalance", "safeguard", "goal_align", "track", "reframe", "evoke", "enact", "join",
        "detach", "repair",
    ),
    ("family", "strategy"): ("safeguard", "join", "track", "counterbalance", "enact", "boundary", "reframe", "repair"),
}
EXPECTED_UTTERANCE_TYPES = (
    "disclosure", "defense", "accusation", "reflection", "recollection", "request", "validation",
    "withdrawal", "repair", "other",
)
SCENARIO_KINDS = list(EXPECTED)


def test_label_lists_and_orders():
    assert patterns("couple") == COUPLE_PATTERNS == EXPECTED["couple", "pattern"]
    assert patterns("family") == FAMILY_PATTERNS == EXPECTED["family", "pattern"]
    assert strategies("couple") == COUPLE_STRATEGIES == EXPECTED["couple", "strategy"]
    assert strategies("family") == FAMILY_STRATEGIES == EXPECTED["family", "strategy"]
    assert UTTERANCE_TYPES == EXPECTED_UTTERANCE_TYPES
    assert (len(COUPLE_PATTERNS), len(FAMILY_PATTERNS)) == (6, 8)
    assert (len(COUPLE_STRATEGIES), len(FAMILY_STRATEGIES)) == (10, 8)
    assert len(UTTERANCE_TYPES) == 10


def test_union_of_labels():
    assert all_patterns() == set(COUPLE_PATTERNS) | set(FAMILY_PATTERNS)
    assert len(all_patterns()) == 11  # pursue_withdraw, repair_softening, mixed_transition shared
    assert all_strategies() == set(COUPLE_STRATEGIES) | {"boundary"}


@pytest.mark.parametrize("bad", ["Couple", "families", "", "group"])
def test_unknown_scenario_raises(bad):
    with pytest.raises(ValueError, match="couple"):
        patterns(bad)
    with pytest.raises(ValueError):
        strategies(bad)
    with pytest.raises(ValueError):
        label_info(bad, "pattern")


@pytest.mark.parametrize(("scenario", "kind"), SCENARIO_KINDS)
def test_label_info_complete(scenario, kind):
    infos = label_info(scenario, kind)
    assert tuple(i.name for i in infos) == EXPECTED[scenario, kind]
    for i in infos:
        assert i.kind == kind
        for text in (i.definition, i.use_when, i.not_when):
            assert isinstance(text, str) and len(text.split()) >= 8, (i.name, text)
        assert len({i.definition, i.use_when, i.not_when}) == 3, i.name


@pytest.mark.parametrize(("scenario", "kind"), SCENARIO_KINDS)
def test_notes_only_name_labels_of_their_own_scenario(scenario, kind):
    """"use X instead" notes must point at labels the annotator can actually choose."""
    own = set(patterns(scenario)) | set(strategies(scenario))
    known = all_patterns() | all_strategies()
    for i in label_info(scenario, kind):
        named = set(re.findall(r"\b[a-z]+(?:_[a-z]+)+\b", f"{i.definition} {i.use_when} {i.not_when}"))
        assert (named & known) - own == set(), i.name


def test_pattern_valence_orders_constructive_above_destructive():
    couple = {i.name: i.valence for i in label_info("couple", "pattern")}
    family = {i.name: i.valence for i in label_info("family", "pattern")}
    for v in (*couple.values(), *family.values()):
        assert -1.0 <= v <= 1.0
    assert couple["constructive_alignment"] > couple["repair_softening"] > 0 > couple["pursue_withdraw"]
    assert couple["attack_attack"] < 0 and couple["withdraw_withdraw"] < 0
    assert family["cooperative_family_alliance"] > family["repair_softening"] > 0 > family["escalation_conflict"]


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_strategy_moves(scenario):
    moves = {i.name: i.move for i in label_info(scenario, "strategy")}
    assert set(moves.values()) <= {"soothing", "exploring", "connecting", "structuring", "advising"}
    assert "" not in moves.values()


def test_utterance_type_definitions():
    infos = label_info("couple", "utterance_type")
    assert tuple(i.name for i in infos) == EXPECTED_UTTERANCE_TYPES
    assert all(len(i.definition.split()) >= 5 for i in infos)
    assert label_info("family", "utterance_type") == infos  # shared by both scenarios
