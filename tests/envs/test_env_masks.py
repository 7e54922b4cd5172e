"""Action masks exposed the three ways, masked actions, out-of-range actions (item 7)."""

from __future__ import annotations

import numpy as np
import pytest

from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.taxonomy.actions import ActionEncoding


def _check_masks(env: GroupSupportEnv, info: dict) -> None:
    n = env.session.n
    enc = env.encoding
    flat = info["action_mask"]
    assert flat.dtype == np.int8 and flat.shape == (enc.n_actions,)
    np.testing.assert_array_equal(flat, enc.mask(n))
    am = env.action_masks()
    assert am.dtype == np.bool_ and am.shape == (enc.n_actions,)
    np.testing.assert_array_equal(am, flat.astype(bool))
    factored = env.action_mask_factored()
    assert isinstance(factored, tuple) and len(factored) == 3
    for got, want in zip(factored, enc.factored_mask(n)):
        assert got.dtype == np.int8
        np.testing.assert_array_equal(got, want)
    # the factored masks describe the same valid set as the flat one
    inter, tmask, smask = factored
    rebuilt = np.concatenate([[inter[0]], (inter[1] * np.outer(tmask, smask)).ravel()])
    np.testing.assert_array_equal(rebuilt, flat)
    # every valid flat action decodes to a present target
    for a in np.flatnonzero(flat):
        d = enc.decode(int(a))
        if d.intervene:
            assert max(enc.target_slots(d.target, n)) < n


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_masks_agree_with_action_encoding(scenario):
    env = GroupSupportEnv(scenario, horizon=3)
    for seed in range(6):
        _, info = env.reset(seed=seed)
        _check_masks(env, info)
        for got, want in zip(info["action_mask_factored"], env.action_mask_factored()):
            np.testing.assert_array_equal(got, want)
        _, _, _, _, info = env.step(0)
        _check_masks(env, info)


def test_couple_mask_is_all_valid():
    env = GroupSupportEnv("couple")
    _, info = env.reset(seed=0)
    assert info["action_mask"].all()
    assert env.action_masks().sum() == 31


def test_small_family_masks_absent_members(small_family):
    env = GroupSupportEnv("family")
    _, info = env.reset(seed=0, options={"dialogue": small_family.sample_id, "start_row": 5})
    n = env.session.n
    assert n == len(small_family.participants) < env.encoding.max_members
    enc = env.encoding
    mask = info["action_mask"]
    # individuals beyond n, dyads touching them, and (for n == 3) all dyads within stay/go as encoded
    for t, option in enumerate(enc.targets):
        expected = option.kind == "group" or max(option.slots) < n and (option.kind == "individual" or n > 2)
        assert bool(mask[enc.encode(t, 0)]) == expected, option
    n_valid_targets = n + (n * (n - 1) // 2 if n > 2 else 0) + 1
    assert mask.sum() == 1 + n_valid_targets * enc.n_strategies
    # sampling with the mask only ever yields valid actions
    env.action_space.seed(0)
    for _ in range(200):
        a = env.action_space.sample(mask=mask)
        assert mask[a]


def test_a_family_larger_than_the_cap_is_refused_by_name(seeds):
    """Members are never left out: a seed family larger than ``max_members`` is an error that
    names it; a cap that fits the group plays it whole."""
    from rescue_env.data import GroupSizeError

    big = max((d for d in seeds if d.scenario == "family"), key=lambda d: len(d.participants))
    cap = len(big.participants) - 1
    with pytest.raises(GroupSizeError, match=big.sample_id):
        GroupSupportEnv("family", max_members=cap)
    env = GroupSupportEnv("family", max_members=cap + 1, data_path=[big])
    _, info = env.reset(seed=0, options={"dialogue": big.sample_id})
    assert env.session.members == tuple(big.participants)
    assert env.action_space.n == ActionEncoding("family", cap + 1).n_actions
    assert env.observation_space["distress"].shape == (cap + 1,)
    assert info["action_mask"].all()  # the group fills the cap


def test_masked_action_is_played_as_listening(small_family):
    opts = {"dialogue": small_family.sample_id, "start_row": 8}
    a_env = GroupSupportEnv("family", record_transcript=True)
    b_env = GroupSupportEnv("family", record_transcript=True)
    _, info = a_env.reset(seed=4, options=opts)
    b_env.reset(seed=4, options=opts)
    enc = a_env.encoding
    n = a_env.session.n
    masked = enc.encode(n, 2)  # the first absent member's individual slot
    assert info["action_mask"][masked] == 0
    for _ in range(3):
        oa, ra, ta, ua, ia = a_env.step(masked)
        ob, rb, tb, ub, ib = b_env.step(0)
        assert ia["invalid_action"] is True and ib["invalid_action"] is False
        assert ia["intervened"] is False
        assert ia["sigma"]["intervention_cost"] == 0.0
        assert not any(r.is_therapist for r in ia["rows"])
        assert ra == rb and ia["state"] == ib["state"]
        for k in oa:
            np.testing.assert_array_equal(oa[k], ob[k])
    assert a_env.episode_stats()["invalid_actions"] == 3
    assert b_env.episode_stats()["invalid_actions"] == 0


@pytest.mark.parametrize("scenario", ["couple", "family"])
@pytest.mark.parametrize("bad", [-1, "n_actions", "n_actions+5", 1.5, "abc", None])
def test_out_of_range_action_raises(scenario, bad):
    env = GroupSupportEnv(scenario)
    env.reset(seed=0)
    n = env.action_space.n
    action = {"n_actions": n, "n_actions+5": n + 5}.get(bad, bad) if isinstance(bad, str) else bad
    with pytest.raises(ValueError):
        env.step(action)
    # a numpy integer in range is fine
    env.step(np.int64(n - 1))


def test_valid_action_intervenes_and_is_recorded():
    env = GroupSupportEnv("couple", record_transcript=True)
    _, info = env.reset(seed=0)
    enc = env.encoding
    a = enc.encode(1, enc.strategy_index("repair"))
    _, _, _, _, info = env.step(a)
    assert info["intervened"] is True and info["invalid_action"] is False
    therapist_rows = [r for r in info["rows"] if r.is_therapist]
    assert len(therapist_rows) == 1
    assert therapist_rows[0].strategy == "repair"
    assert therapist_rows[0].target == [env.session.members[1]]
    assert info["state"].last_strategy == "repair"
    assert info["state"].untended[1] == 0


def test_sb3_contrib_reads_the_masks_through_gym_make():
    """MaskablePPO's route: a vectorised gym.make env exposes action_masks() through the
    wrappers, one mask per sub-env, matching each sub-env's group."""
    from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
    from stable_baselines3.common.env_util import make_vec_env

    vec = make_vec_env("rescue_env/Family-v0", n_envs=4, seed=0)
    assert is_masking_supported(vec)
    sizes = []
    for _ in range(3):
        vec.reset()
        masks = get_action_masks(vec)
        assert masks.shape == (4, 177) and masks.dtype == np.bool_
        for k, session in enumerate(vec.get_attr("session")):
            np.testing.assert_array_equal(masks[k], ActionEncoding("family").mask(session.n).astype(bool))
            sizes.append(session.n)
    assert min(sizes) < 6  # some sub-env has a masked (absent) member
    vec.close()
