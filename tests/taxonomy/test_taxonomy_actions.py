"""The therapist's flat action encoding: sizes, encode/decode, masks, targets, marginals."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from rescue_env.taxonomy import ActionEncoding, Decision

COUPLE = ActionEncoding("couple")
FAMILY = ActionEncoding("family")


def test_couple_sizes():
    assert (COUPLE.n_targets, COUPLE.n_strategies, COUPLE.n_actions) == (3, 10, 31)
    assert [t.kind for t in COUPLE.targets] == ["individual", "individual", "group"]
    assert [t.slots for t in COUPLE.targets] == [(0,), (1,), (0, 1)]
    assert COUPLE.group_target == 2


def test_family_sizes_cap_6():
    assert FAMILY.max_members == 6
    assert (FAMILY.n_targets, FAMILY.n_strategies, FAMILY.n_actions) == (22, 8, 177)
    kinds = [t.kind for t in FAMILY.targets]
    assert kinds == ["individual"] * 6 + ["dyad"] * 15 + ["group"]
    assert [t.slots for t in FAMILY.targets[6:21]] == list(combinations(range(6), 2))
    assert [t.index for t in FAMILY.targets] == list(range(22))


@pytest.mark.parametrize(("cap", "n_targets"), [(3, 3 + 3 + 1), (4, 4 + 6 + 1), (5, 5 + 10 + 1), (8, 8 + 28 + 1)])
def test_family_other_caps(cap, n_targets):
    enc = ActionEncoding("family", max_members=cap)
    assert enc.n_targets == n_targets
    assert enc.n_actions == 1 + n_targets * 8


@pytest.mark.parametrize(
    ("scenario", "cap"), [("couple", 4), ("couple", 1), ("family", 1), ("family", 9), ("group", None), ("Couple", None)]
)
def test_bad_configuration(scenario, cap):
    with pytest.raises(ValueError):
        ActionEncoding(scenario, max_members=cap)


@pytest.mark.parametrize("enc", [COUPLE, FAMILY], ids=["couple", "family"])
def test_encode_decode_round_trip_every_action(enc):
    assert enc.decode(0) == Decision(False) == Decision(False, None, None)
    seen = {0}
    for t in range(enc.n_targets):
        for s in range(enc.n_strategies):
            a = enc.encode(t, s)
            assert 1 <= a < enc.n_actions
            assert enc.decode(a) == Decision(True, t, s)
            seen.add(a)
    assert seen == set(range(enc.n_actions))  # a bijection onto 0..n_actions-1
    for a in range(enc.n_actions):
        d = enc.decode(a)
        if d.intervene:
            assert enc.encode(d.target, d.strategy) == a
    assert enc.decode(np.int64(5)) == enc.decode(5)


@pytest.mark.parametrize("enc", [COUPLE, FAMILY], ids=["couple", "family"])
def test_out_of_range(enc):
    for t, s in [(-1, 0), (enc.n_targets, 0), (0, -1), (0, enc.n_strategies)]:
        with pytest.raises(ValueError, match="out of range"):
            enc.encode(t, s)
    for a in (-1, enc.n_actions, enc.n_actions + 100):
        with pytest.raises(ValueError, match="out of range"):
            enc.decode(a)


def test_strategy_index():
    assert COUPLE.strategy_index("counterbalance") == 0
    assert COUPLE.strategy_index("repair") == 9
    assert FAMILY.strategy_index("boundary") == 5
    with pytest.raises(ValueError, match="boundary"):
        COUPLE.strategy_index("boundary")  # a family-only strategy


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6])
def test_family_masks(n):
    tmask = FAMILY.target_mask(n)
    assert tmask.dtype == np.int8 and tmask.shape == (22,)
    for o in FAMILY.targets:
        if o.kind == "individual":
            expected = o.slots[0] < n
        elif o.kind == "dyad":
            expected = n > 2 and max(o.slots) < n  # dyads need both members, and a group > 2
        else:
            expected = True
        assert tmask[o.index] == int(expected), (n, o)
    assert tmask.sum() == n + (n * (n - 1) // 2 if n > 2 else 0) + 1
    mask = FAMILY.mask(n)
    assert mask.dtype == np.int8 and mask.shape == (177,)
    assert mask[0] == 1  # listening is always allowed
    np.testing.assert_array_equal(mask[1:], np.repeat(tmask, FAMILY.n_strategies))
    for a in range(1, FAMILY.n_actions):
        assert mask[a] == tmask[FAMILY.decode(a).target]


def test_masks_when_intervening_is_not_allowed():
    for enc, n in [(COUPLE, 2), (FAMILY, 4)]:
        mask = enc.mask(n, allow_intervene=False)
        assert mask[0] == 1 and mask[1:].sum() == 0
        intervene, targets, strats = enc.factored_mask(n, allow_intervene=False)
        assert intervene.tolist() == [1, 0]
        np.testing.assert_array_equal(targets, enc.target_mask(n))
        assert strats.tolist() == [1] * enc.n_strategies


def test_couple_mask_allows_everything():
    assert COUPLE.target_mask(2).tolist() == [1, 1, 1]
    assert COUPLE.mask(2).tolist() == [1] * 31
    intervene, targets, strats = COUPLE.factored_mask(2)
    assert intervene.tolist() == [1, 1] and targets.tolist() == [1, 1, 1] and strats.shape == (10,)


@pytest.mark.parametrize(("enc", "n"), [(COUPLE, 0), (COUPLE, 3), (FAMILY, 0), (FAMILY, 7)])
def test_mask_group_size_out_of_range(enc, n):
    with pytest.raises(ValueError):
        enc.target_mask(n)


def test_target_for_slots():
    dyad_01 = FAMILY.targets.index(next(t for t in FAMILY.targets if t.slots == (0, 1)))
    dyad_24 = next(t.index for t in FAMILY.targets if t.slots == (2, 4))
    assert FAMILY.target_for_slots([0, 1], 3) == dyad_01 == 6
    assert FAMILY.target_for_slots([1, 0], 4) == dyad_01  # order and duplicates do not matter
    assert FAMILY.target_for_slots([4, 2, 2], 5) == dyad_24
    assert FAMILY.target_for_slots([3], 5) == 3
    assert FAMILY.target_for_slots([0, 1, 2], 3) == FAMILY.group_target  # everyone
    assert FAMILY.target_for_slots([0, 1, 2], 5) == FAMILY.group_target  # larger than a dyad
    assert FAMILY.target_for_slots([0, 1], 2) == FAMILY.group_target  # a dyad of two is the group
    assert FAMILY.target_for_slots([], 4) == FAMILY.group_target
    assert COUPLE.target_for_slots([1], 2) == 1
    assert COUPLE.target_for_slots([0, 1], 2) == COUPLE.group_target == 2


def test_target_slots():
    assert FAMILY.target_slots(FAMILY.group_target, 4) == (0, 1, 2, 3)
    assert FAMILY.target_slots(6, 4) == (0, 1)
    assert COUPLE.target_slots(1, 2) == (1,)


def test_target_label():
    members = ["Ray", "Linda", "Daniel", "Megan"]
    assert FAMILY.target_label(2, members) == ["Daniel"]
    dyad = next(t.index for t in FAMILY.targets if t.slots == (1, 3))
    assert FAMILY.target_label(dyad, members) == ["Linda", "Megan"]
    assert FAMILY.target_label(FAMILY.group_target, members) == ["Family"]
    assert FAMILY.target_label(6, ["Ray", "Linda"]) == ["Family"]  # dyad of a 2-member group
    assert COUPLE.target_label(0, ["Ana", "Ben"]) == ["Ana"]
    assert COUPLE.target_label(2, ["Ana", "Ben"]) == ["Couple"]


def test_target_label_round_trips_through_target_for_slots():
    members = ["A", "B", "C", "D", "E"]
    mask = FAMILY.target_mask(len(members))
    for o in FAMILY.targets:
        if not mask[o.index]:
            continue
        label = FAMILY.target_label(o.index, members)
        slots = list(range(len(members))) if label == ["Family"] else [members.index(x) for x in label]
        assert FAMILY.target_for_slots(slots, len(members)) == o.index


def test_marginals_hand_built():
    p = np.zeros(COUPLE.n_actions)
    p[0] = 0.2
    p[COUPLE.encode(0, 1)] = 0.3
    p[COUPLE.encode(2, 1)] = 0.4
    p[COUPLE.encode(2, 7)] = 0.1
    speak, targets, strats = COUPLE.marginals(p)
    assert speak == pytest.approx(0.8)
    np.testing.assert_allclose(targets, [0.375, 0.0, 0.625])
    expected = np.zeros(10)
    expected[1], expected[7] = 0.875, 0.125
    np.testing.assert_allclose(strats, expected)
    assert targets.sum() == pytest.approx(1.0) and strats.sum() == pytest.approx(1.0)


def test_marginals_family_and_edge_cases():
    p = np.zeros(FAMILY.n_actions)
    p[FAMILY.encode(FAMILY.group_target, 5)] = 2.0  # unnormalised mass: conditional marginals still normalise
    p[FAMILY.encode(7, 0)] = 2.0
    speak, targets, strats = FAMILY.marginals(p)
    assert speak == pytest.approx(4.0)
    assert targets[FAMILY.group_target] == pytest.approx(0.5) and targets[7] == pytest.approx(0.5)
    assert strats[5] == pytest.approx(0.5) and strats[0] == pytest.approx(0.5)

    listen = np.zeros(COUPLE.n_actions)
    listen[0] = 1.0
    speak, targets, strats = COUPLE.marginals(listen)
    assert speak == 0.0
    np.testing.assert_allclose(targets, np.full(3, 1 / 3))
    np.testing.assert_allclose(strats, np.full(10, 0.1))

    with pytest.raises(ValueError, match="31"):
        COUPLE.marginals(np.ones(30) / 30)


def test_a_couple_of_three_partners_has_dyads_and_the_couple():
    enc = ActionEncoding("couple", max_members=3)
    assert enc.n_targets == 3 + 3 + 1 and enc.n_actions == 1 + 7 * enc.n_strategies
    assert [t.kind for t in enc.targets] == ["individual"] * 3 + ["dyad"] * 3 + ["group"]
    assert enc.target_label(enc.group_target, ["Lorena", "Aryn", "Josh"]) == ["Couple"]
