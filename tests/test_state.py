"""State extraction (s_t, G_t, ρ_t) from annotated rows: invariants on every real and bundled
row, and each documented rule on hand-built dialogues."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from rescue_env.data import (
    THERAPIST,
    Dialogue,
    EmotionRecord,
    Row,
    StrategyRecord,
    ViewpointRecord,
)
from rescue_env.state import UNKNOWN_DISTRESS, GroupState, StateTracker, distress_of, extract_state, iter_states
from rescue_env.taxonomy import patterns


@pytest.fixture(params=["real", "more", "seeds"])
def dialogues(request):
    fixture = {"real": "real_dialogues", "more": "real_more_dialogues", "seeds": "seed_dialogues"}[request.param]
    return request.getfixturevalue(fixture)


# --- invariants on every row of real and bundled data ---------------------------------------


def test_state_invariants_on_every_row(dialogues):
    n_states = 0
    for d in dialogues:
        own = set(patterns(d.scenario))
        states = list(iter_states(d))
        assert len(states) == len(d.rows)
        for row, st in zip(d.rows, states):
            where = (d.sample_id, row.row_index)
            assert st.members == tuple(d.participants), where
            assert THERAPIST not in st.members and d.group_label not in st.members
            assert not set(st.members) & set(d.mentioned)
            assert st.scenario == d.scenario
            n = len(d.participants)
            assert st.distress.shape == (n,) and st.intensity.shape == (n,) and len(st.emotion) == n
            assert np.all(np.isfinite(st.distress)), where
            assert np.all((st.distress >= 0) & (st.distress <= 1)), where
            assert st.stance.shape == (n, n)
            assert np.all(np.diag(st.stance) == 0), where
            assert np.all((st.stance >= -1) & (st.stance <= 1)), where
            assert st.pattern is None or st.pattern in own, where
            assert st.row_index == row.row_index
            n_states += 1
    assert n_states == sum(len(d.rows) for d in dialogues)


def test_real_subset_members_are_the_samples_clients(real_dialogues, real_records):
    for d, rec in zip(real_dialogues, real_records):
        assert extract_state(d).members == tuple(rec["participants"])
        assert extract_state(d, 0).members == tuple(rec["participants"])


def test_three_partner_couple_keeps_all_three(three_partner_couple):
    """The second slice's "couple" of three: every state holds Lorena, Aryn and Josh; Josh,
    who never speaks, is addressed (rows 5 and 17, and as the couple at row 14)."""
    d = three_partner_couple
    assert d.scenario == "couple" and d.participants == ["Lorena", "Aryn", "Josh"]
    st = extract_state(d, upto=5)
    assert st.members == ("Lorena", "Aryn", "Josh") and st.stance.shape == (3, 3) and st.distress.shape == (3,)
    assert st.last_target == ("Aryn", "Josh") and st.untended[2] == 0
    assert extract_state(d, upto=13).untended[2] == 8  # rows 6-13 leave Josh untended
    st = extract_state(d, upto=14)  # "Couple": the whole group of three
    assert st.last_target == ("Lorena", "Aryn", "Josh") and st.untended.tolist() == [0, 0, 0]
    assert st.distress[2] == UNKNOWN_DISTRESS  # never annotated: the documented default


def test_states_move_on_real_and_bundled_data(dialogues):
    """Guards against a state that never changes (which would satisfy every invariant)."""
    for d in dialogues:
        final = extract_state(d)
        assert not np.allclose(final.distress, UNKNOWN_DISTRESS), d.sample_id
        assert not np.all(np.isnan(final.intensity)), d.sample_id
    assert any(extract_state(d).pattern is not None for d in dialogues)
    assert any(np.any(extract_state(d).stance != 0) for d in dialogues)


def test_intensity_and_emotion_are_the_latest_annotation(dialogues):
    """Independent replay of the carry-forward rule over every row."""
    for d in dialogues:
        latest: dict[str, tuple[str, float]] = {}
        for row, st in zip(d.rows, iter_states(d)):
            for e in row.internal_emotion:
                latest[e.person] = (e.emotion_description, e.intensity)
            for i, m in enumerate(d.participants):
                if m in latest:
                    assert st.emotion[i] == latest[m][0]
                    assert st.intensity[i] == latest[m][1]
                    assert st.distress[i] == pytest.approx(distress_of(*latest[m]))
                else:
                    assert math.isnan(st.intensity[i]) and st.emotion[i] == ""
                    assert st.distress[i] == UNKNOWN_DISTRESS


def test_pattern_is_the_latest_relation_label(dialogues):
    for d in dialogues:
        own = set(patterns(d.scenario))
        expected = None
        for row, st in zip(d.rows, iter_states(d)):
            label = row.relation_label
            if label == "":
                expected = None
            elif label in own:
                expected = label
            assert st.pattern == expected, (d.sample_id, row.row_index)


def test_iter_states_equals_extract_state_at_every_row(dialogues):
    for d in dialogues:
        for k, st in enumerate(iter_states(d), start=1):
            assert st == extract_state(d, k), (d.sample_id, k)
        assert extract_state(d) == extract_state(d, len(d.rows))


def test_iter_states_yields_independent_copies(seed_dialogues):
    d = seed_dialogues[0]
    states = list(iter_states(d))
    assert states[0] is not states[1]
    assert states[0].distress is not states[1].distress
    before = states[0].copy()
    states[1].distress[:] = 0.99
    assert states[0] == before


def test_real_family_pattern_not_wiped_by_unannotated_client_rows(real_dialogues):
    d = next(d for d in real_dialogues if d.sample_id == "family_therapy/003/merged")
    states = list(iter_states(d))
    for prev, row, st in zip(states, d.rows[1:], states[1:]):
        if not row.is_therapist and row.relation_pattern is None:
            assert st.pattern == prev.pattern, row.row_index


# --- the rules on hand-built dialogues ------------------------------------------------------


def make(rows: list[Row], members=("Ana", "Ben"), scenario="couple") -> Dialogue:
    for k, r in enumerate(rows, start=1):
        r.row_index = k
    return Dialogue(sample_id="hand/1", scenario=scenario, participants=list(members), rows=rows)


def client(name: str, **kw) -> Row:
    return Row(row_index=0, primary_speaker=name, **kw)


def therapist(**kw) -> Row:
    return Row(row_index=0, primary_speaker=THERAPIST, **kw)


def feel(person: str, text: str, intensity: float) -> list[EmotionRecord]:
    return [EmotionRecord(person, text, intensity)]


def test_initial_state():
    d = make([client("Ana", internal_emotion=feel("Ana", "feels furious", 9))])
    st = extract_state(d, 0)
    assert isinstance(st, GroupState)
    assert st.row_index == 0 and st.pattern is None
    assert st.members == ("Ana", "Ben")
    np.testing.assert_array_equal(st.distress, [UNKNOWN_DISTRESS] * 2)
    assert np.all(np.isnan(st.intensity)) and st.emotion == ["", ""]
    np.testing.assert_array_equal(st.stance, np.zeros((2, 2)))
    assert 0 <= UNKNOWN_DISTRESS <= 1


@pytest.mark.parametrize("upto", [-1, 2, 10])
def test_upto_out_of_range(upto):
    d = make([client("Ana")])
    with pytest.raises(ValueError, match="upto"):
        extract_state(d, upto)


def test_hopeful_is_not_distress():
    hopeful = make([client("Ana", internal_emotion=feel("Ana", "feels hopeful", 6))])
    hopeless = make([client("Ana", internal_emotion=feel("Ana", "feels hopeless", 6))])
    assert extract_state(hopeful).distress[0] < 0.2
    assert extract_state(hopeless).distress[0] > 0.5
    assert extract_state(hopeful).intensity[0] == extract_state(hopeless).intensity[0] == 6


def test_distress_grows_with_intensity():
    low, high = distress_of("feels hurt and angry", 2), distress_of("feels hurt and angry", 9)
    assert 0 <= low < high <= 1
    assert distress_of("feels hurt and angry", 10) <= 1


def test_intensity_carried_forward():
    d = make(
        [
            client("Ana", internal_emotion=feel("Ana", "feels hopeless and alone", 8)),
            client("Ben", dialogue_cleaned="I did not know."),  # nothing annotated for Ana
            therapist(target=["Ben"]),
            client("Ben", internal_emotion=feel("Ben", "feels ashamed", 4)),
            client("Ana", internal_emotion=feel("Ana", "feels relieved and hopeful", 3)),
        ]
    )
    s = list(iter_states(d))
    assert [x.intensity[0] for x in s] == [8, 8, 8, 8, 3]
    assert s[0].emotion[0] == s[3].emotion[0] == "feels hopeless and alone"
    assert s[0].distress[0] == s[1].distress[0] == s[2].distress[0] == s[3].distress[0] > 0.5
    assert s[4].distress[0] < s[3].distress[0]
    assert math.isnan(s[2].intensity[1]) and s[2].distress[1] == UNKNOWN_DISTRESS
    assert s[3].intensity[1] == 4 and s[4].intensity[1] == 4


def test_emotion_of_a_non_member_is_ignored():
    d = make([client("Ana", internal_emotion=feel("Marek", "feels enraged", 10))])
    st = extract_state(d)
    assert st.members == ("Ana", "Ben")
    np.testing.assert_array_equal(st.distress, [UNKNOWN_DISTRESS] * 2)


def test_pattern_rules():
    d = make(
        [
            therapist(relation_cycle_state="pursue_withdraw", relation_pattern="pursue_withdraw"),
            client("Ana"),  # not annotated: carried forward
            client("Ben", relation_pattern="attack_attack"),
            therapist(relation_cycle_state="escalation_conflict"),  # a family label: ignored in a couple
            client("Ana", relation_pattern=""),  # no clear pattern: reset
            client("Ben"),
            therapist(relation_cycle_state="repair_softening", relation_pattern="mixed_transition"),
        ]
    )
    assert [s.pattern for s in iter_states(d)] == [
        "pursue_withdraw",
        "pursue_withdraw",
        "attack_attack",
        "attack_attack",
        None,
        None,
        "repair_softening",  # the therapist row's cycle state wins
    ]


def test_family_pattern_uses_family_taxonomy():
    d = make(
        [therapist(relation_cycle_state="cross_generational_coalition"), client("Cleo", relation_pattern="attack_attack")],
        members=("Ana", "Ben", "Cleo"),
        scenario="family",
    )
    assert [s.pattern for s in iter_states(d)] == ["cross_generational_coalition", "cross_generational_coalition"]


def test_stance_rules():
    hostile = ViewpointRecord("Ana", "Ben", "he never listens", "hostile, contemptuous and resentful")
    warm = ViewpointRecord("Ben", "Ana", "she is trying hard", "warm and appreciative")
    ignored = [
        ViewpointRecord("Ana", "Ana", "I am a failure", "hateful and ashamed"),  # self
        ViewpointRecord("Ana", "Couple", "we are broken", "hopeless"),  # group label
        ViewpointRecord("Ben", THERAPIST, "she takes sides", "suspicious and angry"),
        ViewpointRecord("Ben", "Marek", "he ruined it", "furious"),  # not a member
    ]
    d = make(
        [
            client("Ana", viewpoints_attitudes=[hostile]),
            client("Ben", viewpoints_attitudes=[warm, *ignored]),
            client("Ana"),
        ]
    )
    s = list(iter_states(d))
    assert s[0].stance[0, 1] < -0.3 and s[0].stance[1, 0] == 0  # 0 until annotated
    assert s[1].stance[1, 0] > 0.3
    assert s[2].stance[0, 1] == s[0].stance[0, 1]  # carried forward
    assert np.all(np.diag(s[2].stance) == 0)
    assert s[2].stance.shape == (2, 2)


def test_untended_counts_rows_since_addressed():
    d = make(
        [
            client("Ana"),
            therapist(target=["Ana"], support_strategy=[StrategyRecord(THERAPIST, ["Ana"], "track", "")]),
            client("Ben"),
            therapist(target=["Couple"]),
        ]
    )
    s = list(iter_states(d))
    assert s[1].untended.tolist() == [0, 2]
    assert s[2].untended.tolist() == [1, 3]
    assert s[3].untended.tolist() == [0, 0]
    assert s[1].last_strategy == "track" and s[1].last_target == ("Ana",)


def test_the_tracker_records_the_therapists_moves_so_far(seed_dialogues):
    """``moves``: one (strategy, members addressed) per therapist row with a strategy, in order;
    not part of equality (bookkeeping, like the turn)."""
    d = next(d for d in seed_dialogues if d.scenario == "couple" and any(r.is_therapist and r.support_strategy for r in d.rows))
    tracker = StateTracker(d.scenario, d.participants)
    expected = []
    for row in d.rows:
        st = tracker.update(row)
        if row.is_therapist and row.support_strategy:
            first = row.support_strategy[0]
            expected.append((first.strategy_type, len(tracker.addressed_slots(first.target or row.target))))
        assert list(st.moves) == expected
    assert expected and st.copy() == replace(st, moves=())
