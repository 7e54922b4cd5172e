"""The bundled seeds cover both taxonomies, populate every annotation field, validate under
``--strict`` and are not copies of the real subset."""

from __future__ import annotations

from collections import Counter

import pytest

from rescue_env.taxonomy import UTTERANCE_TYPES, patterns, strategies

#: Row fields every seed fills on at least one row, as the real data does.
ANNOTATION_FIELDS = (
    "target",
    "dialogue_cleaned",
    "utterance_type",
    "tone_of_voice",
    "body_posture",
    "facial_expressions",
    "self_directed_behavior",
    "interaction_behavior",
    "internal_emotion",
    "viewpoints_attitudes",
    "support_strategy",
    "relation_pattern_reason",
    "relation_pattern_evidence_rows",
    "start_time",
    "end_time",
)


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_every_pattern_appears(seed_dialogues, scenario):
    seen = Counter(r.relation_label for d in seed_dialogues if d.scenario == scenario for r in d.rows)
    missing = [p for p in patterns(scenario) if seen[p] == 0]
    assert missing == []


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_every_strategy_appears(seed_dialogues, scenario):
    seen = Counter(
        s.strategy_type for d in seed_dialogues if d.scenario == scenario for r in d.rows for s in r.support_strategy
    )
    missing = [s for s in strategies(scenario) if seen[s] == 0]
    assert missing == []


def test_every_utterance_type_appears(seed_dialogues):
    seen = {r.utterance_type for d in seed_dialogues for r in d.rows}
    assert set(UTTERANCE_TYPES) <= seen
    assert seen <= set(UTTERANCE_TYPES) | {""}


def test_labels_stay_inside_their_scenario(seed_dialogues):
    for d in seed_dialogues:
        for r in d.rows:
            assert r.relation_label in (None, "", *patterns(d.scenario)), (d.sample_id, r.row_index)
            for s in r.support_strategy:
                assert s.strategy_type in strategies(d.scenario), (d.sample_id, r.row_index)


def test_every_annotation_field_is_populated(seed_dialogues):
    for d in seed_dialogues:
        empty = [f for f in ANNOTATION_FIELDS if not any(getattr(r, f) for r in d.rows)]
        assert empty == [], d.sample_id
    everywhere = ("background_dialogue", "relation_cycle_reason", "relation_cycle_evidence_rows")
    for f in everywhere:  # rarer fields: at least somewhere in the seeds
        assert any(getattr(r, f) for d in seed_dialogues for r in d.rows), f


def test_therapist_and_clients_take_turns(seed_dialogues):
    for d in seed_dialogues:
        speakers = Counter(r.primary_speaker for r in d.rows)
        assert speakers["Therapist"] > 0, d.sample_id
        assert all(speakers[p] > 0 for p in d.participants), d.sample_id
        for r in d.rows:
            for e in r.internal_emotion:
                assert e.person in d.participants and 1 <= e.intensity <= 10


def test_strict_validation_of_seeds(run_cli, seeds_path, seed_dialogues):
    res = run_cli("data", "validate", "--strict")  # default data set = the seeds
    assert res.rc == 0, res.err
    assert "warnings: 0" in res.out
    by_scn = Counter(d.scenario for d in seed_dialogues)
    assert f"couple: {by_scn['couple']} dialogues" in res.out
    assert f"family: {by_scn['family']} dialogues" in res.out
    assert f"{len(seed_dialogues)} dialogues, {sum(len(d.rows) for d in seed_dialogues)} rows" in res.out
    explicit = run_cli("data", "validate", str(seeds_path), "--strict")
    assert explicit.rc == 0 and explicit.out == res.out


def test_seeds_are_not_copied_from_the_real_subset(seed_dialogues, real_dialogues):
    real_text = {r.dialogue_cleaned for d in real_dialogues for r in d.rows if len(r.dialogue_cleaned) > 40}
    copied = [
        (d.sample_id, r.row_index) for d in seed_dialogues for r in d.rows if r.dialogue_cleaned in real_text
    ]
    assert copied == []
    real_people = {p for d in real_dialogues for p in d.participants}
    assert not real_people & {p for d in seed_dialogues for p in d.participants}
