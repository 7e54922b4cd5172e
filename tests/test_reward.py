"""σ* reward: components, configurable weights, discounted return."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rescue_env import parallel_env
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.config import EnvConfig
from rescue_env.core import Core
from rescue_env.dynamics.params import scenario_params
from rescue_env.reward import RewardConfig
from rescue_env.state import GroupState
from rescue_env.taxonomy.actions import ActionEncoding

COMPONENTS = {"mean_distress", "stance", "max_distress", "intervention_cost"}


def _state(distress, stance) -> GroupState:
    n = len(distress)
    return GroupState(
        scenario="family" if n > 2 else "couple",
        members=tuple(f"m{i}" for i in range(n)),
        distress=np.asarray(distress, float),
        intensity=np.full(n, 5.0),
        emotion=[""] * n,
        stance=np.asarray(stance, float),
        untended=np.zeros(n, dtype=np.int64),
    )


def sigma_star(state: GroupState, intervened: bool, cfg: RewardConfig) -> tuple[float, dict[str, float]]:
    """σ* of ``state`` as the simulator core books it (reward, weighted components)."""
    core = Core(
        scenario_params(None, state.scenario), ActionEncoding(state.scenario, None if state.n == 2 else max(3, state.n)), cfg, None, 1,
        episode_end=EnvConfig(state.scenario), heterogeneity=1.0,
    )  # fmt: skip
    core.load(0, state, key=0)
    core.state.intervened[0] = intervened
    core.finish()
    return float(core.rewards[0]), core.step_components(0)


def test_sigma_star_formula_by_hand():
    st = _state([0.2, 0.8, 0.5], [[0, 0.4, -0.2], [-0.6, 0, 0.1], [0.3, 0.0, 0]])
    cfg = RewardConfig(w_mean=2.0, beta=0.5, lam=3.0, cost=0.1)
    r, comp = sigma_star(st, True, cfg)
    mean_d = 0.5
    mean_g = (0.4 - 0.2 - 0.6 + 0.1 + 0.3 + 0.0) / 6
    assert set(comp) == COMPONENTS
    assert comp["mean_distress"] == pytest.approx(-2.0 * mean_d)
    assert comp["stance"] == pytest.approx(0.5 * mean_g)
    assert comp["max_distress"] == pytest.approx(-3.0 * 0.8)
    assert comp["intervention_cost"] == pytest.approx(-0.1)
    assert r == pytest.approx(-2.0 * mean_d + 0.5 * mean_g - 3.0 * 0.8 - 0.1)
    r0, comp0 = sigma_star(st, False, cfg)
    assert comp0["intervention_cost"] == 0.0 and r0 == pytest.approx(r + 0.1)


def test_bucket_term_penalises_an_unequal_group_more():
    """Same mean distress, one member worse off: σ* is lower (the λ max term)."""
    cfg = RewardConfig()
    even, _ = sigma_star(_state([0.5, 0.5], [[0, 0], [0, 0]]), False, cfg)
    uneven, _ = sigma_star(_state([0.1, 0.9], [[0, 0], [0, 0]]), False, cfg)
    assert uneven < even
    assert even - uneven == pytest.approx(cfg.lam * 0.4)


@pytest.mark.parametrize("gamma", [-0.1, 1.5])
def test_gamma_must_be_a_discount(gamma):
    with pytest.raises(ValueError, match="gamma"):
        RewardConfig(gamma=gamma)


def _episode(scenario="couple", seed=0, **kw):
    env = GroupSupportEnv(scenario, terminate_on_settle=False, horizon=20, **kw)
    enc = env.encoding
    acts = [0, enc.encode(0, 1), enc.encode(1, 2), 0, enc.encode(enc.group_target, 0)]
    _, info = env.reset(seed=seed)
    rewards, infos = [], []
    t = 0
    while True:
        _, r, term, trunc, info = env.step(acts[t % len(acts)])
        t += 1
        rewards.append(r)
        infos.append(info)
        if term or trunc:
            return env, rewards, infos


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_components_in_info_sum_to_the_reward(scenario):
    env, rewards, infos = _episode(scenario, reward={"w_mean": 1.3, "beta": 0.7, "lam": 0.9, "cost": 0.2})
    for r, info in zip(rewards, infos):
        comp = info["sigma"]
        assert set(comp) == COMPONENTS
        assert sum(comp.values()) == pytest.approx(r, abs=1e-12)
        assert comp["intervention_cost"] == pytest.approx(-0.2 * info["intervened"])
        st = info["state"]
        assert comp["max_distress"] == pytest.approx(-0.9 * st.distress.max())
        assert comp["mean_distress"] == pytest.approx(-1.3 * st.distress.mean())
        assert comp["stance"] == pytest.approx(0.7 * st.mean_stance())
    ep = infos[-1]["episode_stats"]
    for k in COMPONENTS:
        assert ep["sigma"][k] == pytest.approx(sum(i["sigma"][k] for i in infos))


@pytest.mark.parametrize("gamma", [0.9, None])
def test_sigma_return_is_the_discounted_sum(gamma):
    kw = {"reward": {"gamma": gamma}} if gamma is not None else {}
    g = gamma if gamma is not None else RewardConfig().gamma
    _, rewards, infos = _episode(**kw)
    assert all("sigma_return" not in i for i in infos[:-1])
    expected = math.fsum(g**t * r for t, r in enumerate(rewards))
    assert infos[-1]["sigma_return"] == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert infos[-1]["episode_stats"]["sigma_return"] == infos[-1]["sigma_return"]
    assert infos[-1]["sigma_return"] != pytest.approx(sum(rewards))  # the discount matters


def test_weights_change_returns():
    _, base_r, base_i = _episode(seed=3)
    _, lam0_r, lam0_i = _episode(seed=3, reward={"lam": 0})
    # same seed, same actions: same states, so only the reward differs
    assert [i["state"] for i in base_i] == [i["state"] for i in lam0_i]
    assert all(i["sigma"]["max_distress"] == 0.0 for i in lam0_i)
    assert lam0_i[-1]["sigma_return"] > base_i[-1]["sigma_return"]
    assert lam0_r != base_r
    _, _, beta0 = _episode(seed=3, reward={"beta": 0.0})
    assert all(i["sigma"]["stance"] == 0.0 for i in beta0)
    assert beta0[-1]["sigma_return"] != base_i[-1]["sigma_return"]
    _, _, cost = _episode(seed=3, reward={"cost": 1.0})
    n_speak = sum(i["intervened"] for i in cost)
    assert n_speak > 0
    assert sum(i["sigma"]["intervention_cost"] for i in cost) == pytest.approx(-n_speak)


def test_reward_config_object_accepted():
    env = GroupSupportEnv("couple", reward=RewardConfig(lam=2.5))
    assert env.reward_cfg.lam == 2.5
    with pytest.raises(TypeError):
        GroupSupportEnv("couple", reward={"lambda": 1.0})


def test_parallel_env_reward_matches_gym_env():
    """The therapist's reward in the ParallelEnv is the same σ* with the same components."""
    par = parallel_env(scenario="couple", horizon=6, terminate_on_settle=False, reward={"lam": 2.0})
    par.reset(seed=0)
    total = []
    while par.agents:
        _, rew, _, _, infos = par.step({"therapist": 0})
        comp = infos["therapist"]["sigma"]
        assert sum(comp.values()) == pytest.approx(rew["therapist"])
        assert comp["max_distress"] == pytest.approx(-2.0 * infos["therapist"]["state"].distress.max())
        total.append(rew["therapist"])
        st = infos["therapist"]["state"]
        for i in range(st.n):
            warmth = st.stance[i].sum() / (st.n - 1)
            assert rew[f"client_{i}"] == pytest.approx(-st.distress[i] + par.reward_cfg.beta * warmth)
    g = par.reward_cfg.gamma
    assert infos["therapist"]["sigma_return"] == pytest.approx(sum(g**t * r for t, r in enumerate(total)))


def test_reward_weights_cannot_change_behind_the_core():
    """A weight changed in place would not reach the core: the config is frozen; a new config
    handed to the env applies from the next step."""
    env = GroupSupportEnv("couple")
    with pytest.raises(Exception, match="cannot assign"):
        env.reward_cfg.lam = 5.0  # type: ignore[misc]
    env.reset(seed=0)
    _, r1, *_ = env.step(0)
    env.reset(seed=0)
    env.reward_cfg = RewardConfig(lam=5.0)
    _, r5, _, _, info = env.step(0)
    assert info["sigma"]["max_distress"] == pytest.approx(-5.0 * info["state"].distress.max())
    assert r5 < r1


@pytest.mark.parametrize("bad", [{"lam": -5}, {"w_mean": -1}, {"cost": -0.1}, {"beta": float("nan")}, {"lam": "x"}])
def test_nonsense_weights_are_refused(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        RewardConfig(**bad)


@pytest.mark.parametrize(
    "bad",
    [{"lam": math.inf}, {"beta": math.inf}, {"w_mean": -math.inf}, {"lam": 1e308}, {"cost": math.nan}, {"gamma": math.nan}],
    ids=["lam-inf", "beta-inf", "w_mean-minus-inf", "lam-1e308", "cost-nan", "gamma-nan"],
)
def test_weights_must_be_finite_and_bounded(bad):
    """inf passes ``x >= 0`` and 1e308 overflows σ* to -inf: both refused, naming the weight."""
    with pytest.raises(ValueError, match=f"^{next(iter(bad))}="):
        RewardConfig(**bad)


def test_the_largest_weight_keeps_the_return_finite():
    from rescue_env.reward import MAX_WEIGHT

    env = GroupSupportEnv(reward=RewardConfig(w_mean=MAX_WEIGHT, beta=MAX_WEIGHT, lam=MAX_WEIGHT, cost=MAX_WEIGHT))
    env.reset(seed=0)
    done, info = False, {}
    while not done:
        _, r, term, trunc, info = env.step(1)
        assert math.isfinite(r)
        done = term or trunc
    assert math.isfinite(info["sigma_return"])
