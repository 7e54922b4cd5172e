"""The action-mask contract MaskablePPO relies on: ``env.action_masks()`` (bool, one entry per
action, equal to ``info["action_mask"]``), sb3-contrib's ``get_action_masks`` through a
vectorised env, and a MaskablePPO that never picks a masked action on families of 3-5."""

from __future__ import annotations

import numpy as np
import pytest
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.utils import get_action_masks, is_masking_supported
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from rescue_env.envs.gym_env import GroupSupportEnv


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_action_masks_is_bool_per_action_and_matches_info(scenario, seeds):
    env = GroupSupportEnv(scenario)
    n_actions = env.action_space.n
    for k, d in enumerate(d for d in seeds if d.scenario == scenario):
        obs, info = env.reset(seed=k, options={"dialogue": d.sample_id})
        for t in range(5):
            m = env.action_masks()
            assert isinstance(m, np.ndarray) and m.dtype == np.bool_ and m.shape == (n_actions,)
            assert np.array_equal(m, info["action_mask"].astype(bool))
            assert m[0], "listening is always allowed"
            # the mask is exactly the present members' target options
            assert int(m.sum()) == 1 + int(env.encoding.target_mask(len(d.participants)).sum()) * env.encoding.n_strategies
            obs, _, term, trunc, info = env.step(int(np.flatnonzero(m)[t % int(m.sum())]))
            if term or trunc:
                break
        # the mask is a copy: mutating it does not change the env's
        m[:] = False
        assert env.action_masks()[0]


@pytest.mark.parametrize("wrap", [False, True], ids=["bare", "monitor"])
def test_get_action_masks_through_a_dummy_vec_env(families, wrap):
    def make(d):
        def _init():
            env = GroupSupportEnv("family", data_path=[d])
            return Monitor(env) if wrap else env

        return _init

    venv = DummyVecEnv([make(d) for d in families])
    assert is_masking_supported(venv)
    venv.seed(0)
    venv.reset()
    masks = get_action_masks(venv)
    n_actions = venv.action_space.n
    assert masks.shape == (3, n_actions) and masks.dtype == np.bool_
    for row, d in zip(masks, families):
        n = len(d.participants)
        enc = GroupSupportEnv("family").encoding
        assert np.array_equal(row, enc.mask(n).astype(bool))
    # the three families differ in size, so do their masks
    assert len({int(r.sum()) for r in masks}) == 3
    venv.close()


@pytest.mark.parametrize("deterministic", [False, True])
def test_maskable_ppo_never_predicts_a_masked_action_on_families(families, sb3_policies, deterministic):
    model = MaskablePPO.load(sb3_policies[("maskable_ppo", "family")], device="cpu")
    env = GroupSupportEnv("family")
    played = masked_available = 0
    for k, d in enumerate(families):
        for ep in range(2):
            obs, info = env.reset(seed=10 * k + ep, options={"dialogue": d.sample_id})
            assert env.state.n == len(d.participants) in (3, 4, 5)
            done = False
            while not done:
                mask = env.action_masks()
                assert np.array_equal(mask, info["action_mask"].astype(bool))
                masked_available += int((~mask).sum())
                action, _ = model.predict(obs, action_masks=mask, deterministic=deterministic)
                a = int(action)
                assert mask[a], f"MaskablePPO picked masked action {a} for a family of {len(d.participants)}"
                obs, _, term, trunc, info = env.step(a)
                assert not info["invalid_action"]
                played += 1
                done = term or trunc
    assert played > 20 and masked_available > 0


def test_maskable_ppo_masked_distribution_puts_no_mass_on_masked_actions(families, sb3_policies):
    model = MaskablePPO.load(sb3_policies[("maskable_ppo", "family")], device="cpu")
    env = GroupSupportEnv("family")
    obs, _ = env.reset(seed=0, options={"dialogue": families[0].sample_id})
    mask = env.action_masks()
    obs_t, _ = model.policy.obs_to_tensor(obs)
    dist = model.policy.get_distribution(obs_t, action_masks=mask[None, :])
    probs = dist.distribution.probs[0].detach().numpy()
    assert probs[~mask].max() == 0.0 and probs.sum() == pytest.approx(1.0, abs=1e-5)
