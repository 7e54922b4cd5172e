"""Behaviour-regularised training: the KL term is the one stated, on the masks; it enters
MaskablePPO's loss as ``coef · KL``; behaviour cloning fits the real moves."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch as th
from sb3_contrib import MaskablePPO

from rescue_env.agents.grounded import PriorRegularisedPolicy, behaviour_clone, prior_kl_terms, random_clock, real_moves, regularise, simulated_moves
from rescue_env.agents.prior import real_decisions
from rescue_env.envs.vec_env import GroupSupportVecEnv


def test_kl_terms_on_a_hand_computed_case():
    """Action 0 listens; actions 1-3 are three targets with one strategy; action 3 is masked."""
    probs = th.tensor([[0.2, 0.6, 0.2, 0.0], [0.5, 0.25, 0.25, 0.0]])
    prior = th.tensor([[0.5, 0.125, 0.125, 0.25], [0.5, 0.25, 0.25, 0.0]])
    mask = th.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    kl_speak, kl_target, kl_strategy = prior_kl_terms(probs, prior, mask, n_strategies=1)
    # row 0: the prior renormalised on the mask is (2/3, 1/6, 1/6): speaks with 1/3, its
    # targets given speaking (1/2, 1/2); π speaks with 0.8, its targets (3/4, 1/4)
    speak = 0.8 * math.log(0.8 / (1 / 3)) + 0.2 * math.log(0.2 / (2 / 3))
    move = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.5)
    assert kl_speak[0].item() == pytest.approx(speak, abs=1e-6)
    assert kl_target[0].item() == pytest.approx(move, abs=1e-6) and kl_strategy[0].item() == pytest.approx(0.0, abs=1e-7)
    # the chain rule gives back the whole KL(π ‖ π_prior) on the mask
    whole = 0.2 * math.log(0.2 / (2 / 3)) + 0.6 * math.log(0.6 / (1 / 6)) + 0.2 * math.log(0.2 / (1 / 6))
    assert (kl_speak[0] + 0.8 * kl_target[0]).item() == pytest.approx(whole, abs=1e-6)
    assert max(abs(k[1].item()) for k in (kl_speak, kl_target, kl_strategy)) < 1e-6


def test_kl_terms_split_target_and_strategy():
    """Two targets × two strategies (actions 1 + 2t + s): π speaks to target 0 only, with
    strategies (3/4, 1/4); the prior is uniform over the four moves."""
    probs = th.tensor([[0.2, 0.6, 0.2, 0.0, 0.0]])
    prior = th.tensor([[0.2, 0.2, 0.2, 0.2, 0.2]])
    kl_speak, kl_target, kl_strategy = prior_kl_terms(probs, prior, None, n_strategies=2)
    assert kl_speak.item() == pytest.approx(0.0, abs=1e-6)
    assert kl_target.item() == pytest.approx(math.log(2), abs=1e-6)  # (1, 0) against (1/2, 1/2)
    assert kl_strategy.item() == pytest.approx(0.75 * math.log(1.5) + 0.25 * math.log(0.5), abs=1e-6)


@pytest.fixture(scope="module")
def model():
    th.manual_seed(0)
    venv = GroupSupportVecEnv("couple", num_envs=2, seed=0)
    m = MaskablePPO(PriorRegularisedPolicy, venv, n_steps=16, batch_size=16, ent_coef=0.01, seed=0, device="cpu", policy_kwargs={"net_arch": [16]})
    yield m
    venv.close()


def test_the_loss_gains_exactly_the_factored_kl(model):
    """MaskablePPO's loss adds ``ent_coef · (−entropy term)``: after :func:`regularise` that is
    ``−0.01 · H(π) + coef · kl_target + strategy_coef · kl_strategy + speak_coef · kl_speak``,
    each KL computed here by hand from the policy's distribution."""
    venv = model.get_env()
    obs = venv.reset()
    masks = np.asarray(venv.env_method("action_masks"))
    n = venv.action_space.n
    S = venv.get_attr("encoding")[0].n_strategies
    rng = np.random.default_rng(0)
    prior = rng.uniform(0.1, 1.0, n)
    prior /= prior.sum()
    regularise(model, lambda o: np.tile(prior, (len(o), 1)), coef=0.3, n_strategies=S, speak_coef=0.05, strategy_coef=0.7)
    assert model.ent_coef == 1.0
    o = th.as_tensor(obs)
    actions = th.zeros(len(obs), dtype=th.long)
    _, _, slot = model.policy.evaluate_actions(o, actions, action_masks=masks)
    dist = model.policy.get_distribution(o, action_masks=masks)
    p = dist.distribution.probs.detach().numpy().astype(np.float64)
    q = prior * masks
    q = q / q.sum(axis=1, keepdims=True)

    def kl(a, b):
        a, b = a / a.sum(axis=-1, keepdims=True), b / b.sum(axis=-1, keepdims=True)
        return np.where(a > 0, a * (np.log(np.maximum(a, 1e-300)) - np.log(np.maximum(b, 1e-300))), 0).sum(axis=-1)

    kl_speak = kl(np.stack([1 - p[:, 0], p[:, 0]], 1), np.stack([1 - q[:, 0], q[:, 0]], 1))
    grid, qgrid = p[:, 1:].reshape(len(p), -1, S), q[:, 1:].reshape(len(q), -1, S)
    pt = grid.sum(axis=2)
    kl_target = kl(pt, qgrid.sum(axis=2))
    kl_strategy = (pt / pt.sum(axis=1, keepdims=True) * np.nan_to_num(kl(grid, qgrid))).sum(axis=1)
    h = dist.entropy().detach().numpy()
    assert np.allclose(slot.detach().numpy(), 0.01 * h - 0.3 * kl_target - 0.7 * kl_strategy - 0.05 * kl_speak, atol=1e-4)
    # MaskablePPO's train() runs with it (one update on a small rollout)
    model.learn(32)


def test_without_a_prior_the_policy_is_plain():
    venv = GroupSupportVecEnv("couple", num_envs=1, seed=0)
    m = MaskablePPO(PriorRegularisedPolicy, venv, n_steps=16, batch_size=16, seed=0, device="cpu")
    o = th.as_tensor(venv.reset())
    masks = np.asarray(venv.env_method("action_masks"))
    _, _, ent = m.policy.evaluate_actions(o, th.zeros(1, dtype=th.long), action_masks=masks)
    assert th.allclose(ent, m.policy.get_distribution(o, action_masks=masks).entropy())
    venv.close()


def test_behaviour_cloning_fits_the_real_moves(model, seeds):
    venv = model.get_env()
    observer, encoding = venv.get_attr("observer")[0], venv.get_attr("encoding")[0]
    obs, actions, masks = real_moves(seeds, observer, encoding)
    assert len(actions) > 20 and (actions == 0).any() and (actions > 0).any()
    assert all(masks[i, a] for i, a in enumerate(actions))
    nll = behaviour_clone(model, obs, actions, masks, epochs=15)
    assert nll[-1] < nll[0] - 0.2


def test_real_moves_include_the_moves_after_the_therapists_own_row(seeds):
    """STP/SSP ask what the therapist does right after its own row, a state the simulator
    never shows; cloning and the demonstration term learn it from those real moves (each the
    therapist's next move, shown with no client utterance), and ``after_therapist=False``
    keeps only the decisions after a client row."""
    venv = GroupSupportVecEnv("couple", num_envs=1, seed=0)
    observer, encoding = venv.observer, venv.encoding
    venv.close()
    obs, actions, _ = real_moves(seeds, observer, encoding)
    client_only, client_actions, _ = real_moves(seeds, observer, encoding, after_therapist=False)
    no_utterance = observer.unflatten_batch(obs.astype(np.float64))["utterance"].sum(axis=1) == 0
    dec = real_decisions([d for d in seeds if len(d.participants) <= encoding.max_members], "couple")
    after_therapist = sum(1 for y, t, s in zip(dec.speak, dec.target, dec.strategy) if y < 0 and t and s >= 0)
    assert after_therapist > 0 and len(actions) == len(client_actions) + after_therapist
    assert (actions[no_utterance] > 0).all() and no_utterance.sum() >= after_therapist  # moves, never listens
    client_no_utterance = observer.unflatten_batch(client_only.astype(np.float64))["utterance"].sum(axis=1) == 0
    assert client_no_utterance.sum() == no_utterance.sum() - after_therapist  # what is left: client rows of no known type


def test_the_demonstration_term_adds_the_real_moves_nll(seeds):
    """``demo_coef`` alone (no prior): the entropy slot is ``0.01 · H(π) − demo_coef ·`` the
    mean NLL given speaking of a draw of the real moves where the therapist spoke (the same
    draw, by its seed); PPO then raises their likelihood."""
    venv = GroupSupportVecEnv("couple", num_envs=2, seed=0)
    m = MaskablePPO(PriorRegularisedPolicy, venv, n_steps=32, batch_size=32, ent_coef=0.01, seed=0, device="cpu", policy_kwargs={"net_arch": [16]})
    observer, encoding = venv.get_attr("observer")[0], venv.get_attr("encoding")[0]
    demos = real_moves(seeds, observer, encoding)
    regularise(m, None, 0.0, n_strategies=encoding.n_strategies, demos=demos, demo_coef=2.0, seed=3)
    assert m.ent_coef == 1.0 and m.policy.prior_fn is None
    o = th.as_tensor(venv.reset())
    masks = np.asarray(venv.env_method("action_masks"))
    _, _, slot = m.policy.evaluate_actions(o, th.zeros(len(o), dtype=th.long), action_masks=masks)
    spoke = demos[1] > 0
    obs, acts, moves_masks = demos[0][spoke], demos[1][spoke], demos[2][spoke]
    idx = np.random.default_rng(3).integers(len(acts), size=min(64, len(acts)))
    with th.no_grad():
        p = m.policy.get_distribution(th.as_tensor(obs[idx]), action_masks=moves_masks[idx]).distribution.probs.numpy().astype(np.float64)
        nll = -np.mean(np.log(p[np.arange(len(idx)), acts[idx]] / p[:, 1:].sum(axis=1)))  # given speaking
        h = m.policy.get_distribution(o, action_masks=masks).entropy().numpy()
    assert np.allclose(slot.detach().numpy(), 0.01 * h - 2.0 * nll, atol=1e-5)
    assert m.policy.last_demo_nll == pytest.approx(nll, abs=1e-5)

    def demo_nll() -> float:
        with th.no_grad():
            p = m.policy.get_distribution(th.as_tensor(obs), action_masks=moves_masks).distribution.probs.numpy()
            return -np.mean(np.log(p[np.arange(len(acts)), acts] / p[:, 1:].sum(axis=1)))

    before = demo_nll()
    m.learn(256)
    assert demo_nll() < before - 0.1
    venv.close()


def test_regularise_refuses_a_plain_policy():
    venv = GroupSupportVecEnv("couple", num_envs=1, seed=0)
    m = MaskablePPO("MlpPolicy", venv, n_steps=16, batch_size=16, seed=0, device="cpu")
    with pytest.raises(TypeError, match="PriorRegularisedPolicy"):
        regularise(m, None, 0.0, n_strategies=1, demos=None, demo_coef=1.0)
    venv.close()


def test_prior_and_demonstration_terms_together(seeds):
    """Both terms on a rollout batch larger than the demo batch: the slot is the sum of the
    two (the demo draw must not disturb the batch's own distribution)."""
    venv = GroupSupportVecEnv("couple", num_envs=4, seed=0)
    m = MaskablePPO(PriorRegularisedPolicy, venv, n_steps=32, batch_size=64, ent_coef=0.0, seed=0, device="cpu", policy_kwargs={"net_arch": [16]})
    observer, encoding = venv.get_attr("observer")[0], venv.get_attr("encoding")[0]
    demos = real_moves(seeds, observer, encoding)
    uniform = lambda o: np.ones((len(o), venv.action_space.n))  # noqa: E731
    regularise(m, uniform, 0.5, n_strategies=encoding.n_strategies, demos=demos, demo_coef=1.0, seed=1)
    m.policy.demo_batch = 8
    o = th.as_tensor(venv.reset())
    masks = np.asarray(venv.env_method("action_masks"))
    _, _, both = m.policy.evaluate_actions(o, th.zeros(len(o), dtype=th.long), action_masks=masks)
    demo_part = m.policy.last_demo_nll
    m.policy.demo_coef = 0.0
    _, _, kl_only = m.policy.evaluate_actions(o, th.zeros(len(o), dtype=th.long), action_masks=masks)
    assert both.shape == (4,) and np.allclose(both.detach().numpy(), kl_only.detach().numpy() - demo_part, atol=1e-5)
    m.policy.demo_coef = 1.0
    m.learn(128)  # PPO's train() with both terms, minibatches of 64 against demo draws of 8
    venv.close()


def test_the_target_kl_on_real_states_is_added_on_a_draw_of_the_real_moves(seeds):
    """``real_coef``: the slot also loses ``real_coef ·`` KL_target averaged over a draw of
    the real moves (where the therapist spoke); PPO then brings whom the policy addresses on
    those real states, which the simulator never shows it, toward the prior."""
    venv = GroupSupportVecEnv("couple", num_envs=2, seed=0)
    m = MaskablePPO(PriorRegularisedPolicy, venv, n_steps=32, batch_size=32, ent_coef=0.0, seed=0, device="cpu", policy_kwargs={"net_arch": [16]})
    observer, encoding = venv.get_attr("observer")[0], venv.get_attr("encoding")[0]
    obs, actions, masks = real_moves(seeds, observer, encoding)
    assert (actions == 0).any()
    target = np.random.default_rng(0).uniform(0.1, 1.0, venv.action_space.n)
    prior = lambda o: np.tile(target / target.sum(), (len(o), 1))  # noqa: E731
    regularise(m, prior, 0.4, n_strategies=encoding.n_strategies, strategy_coef=0.2, speak_coef=0.1, demos=(obs, actions, masks), seed=5, real_coef=1.5)
    assert m.policy.demo_coef == 0.0 and m.policy.real_coef == 1.5
    o = th.as_tensor(venv.reset())
    sim_masks = np.asarray(venv.env_method("action_masks"))
    _, _, both = m.policy.evaluate_actions(o, th.zeros(len(o), dtype=th.long), action_masks=sim_masks)
    spoke = np.flatnonzero(actions > 0)
    idx = spoke[np.random.default_rng(5).integers(len(spoke), size=min(64, len(spoke)))]
    with th.no_grad():
        p = m.policy.get_distribution(th.as_tensor(obs[idx]), action_masks=masks[idx]).distribution.probs
        kl_target = prior_kl_terms(p, th.as_tensor(prior(obs[idx]), dtype=th.float32), th.as_tensor(masks[idx], dtype=th.float32), encoding.n_strategies)[1]
        real_part = 1.5 * float(kl_target.mean())
    m.policy.real_coef = 0.0
    _, _, sim_only = m.policy.evaluate_actions(o, th.zeros(len(o), dtype=th.long), action_masks=sim_masks)
    assert real_part > 0.01 and np.allclose(both.detach().numpy(), sim_only.detach().numpy() - real_part, atol=1e-5)

    def kl_target_on_real() -> float:
        with th.no_grad():
            p = m.policy.get_distribution(th.as_tensor(obs[spoke]), action_masks=masks[spoke]).distribution.probs
            return float(prior_kl_terms(p, th.as_tensor(prior(obs[spoke]), dtype=th.float32), th.as_tensor(masks[spoke], dtype=th.float32), encoding.n_strategies)[1].mean())

    m.policy.real_coef = 5.0  # the real states' KL dominates the loss: it must fall
    before = kl_target_on_real()
    m.learn(256)
    assert kl_target_on_real() < 0.7 * before
    venv.close()


def test_the_prior_on_real_states_does_not_read_the_episode_clock(seeds):
    """π_prior on the real states is computed once (:meth:`PriorRegularisedPolicy.real_kl`)
    while every draw redraws their clock: that holds only if the prior does not read it."""
    from rescue_env.agents.grounded import prior_on_obs
    from rescue_env.agents.prior import BehaviourPrior

    venv = GroupSupportVecEnv("couple", num_envs=1, seed=0)
    obs, _, _ = real_moves(seeds, venv.observer, venv.encoding)
    prior_fn = prior_on_obs(BehaviourPrior.fit(seeds, ["couple"]), venv.observer, venv.encoding)
    assert np.array_equal(prior_fn(random_clock(obs, venv.observer, np.random.default_rng(0))), prior_fn(obs))
    venv.close()


def test_the_kl_on_real_states_needs_a_prior_and_real_moves(seeds):
    venv = GroupSupportVecEnv("couple", num_envs=1, seed=0)
    m = MaskablePPO(PriorRegularisedPolicy, venv, n_steps=16, batch_size=16, seed=0, device="cpu")
    uniform = lambda o: np.ones((len(o), venv.action_space.n))  # noqa: E731
    with pytest.raises(ValueError, match="prior and the real moves"):
        regularise(m, uniform, 0.1, n_strategies=1, demos=None, real_coef=1.0)
    with pytest.raises(ValueError, match="prior and the real moves"):
        regularise(m, None, 0.0, n_strategies=1, demos=real_moves(seeds, venv.observer, venv.encoding), real_coef=1.0)
    with pytest.raises(ValueError, match="real_coef must be >= 0"):
        regularise(m, uniform, 0.1, n_strategies=1, demos=None, real_coef=-1.0)
    obs, actions, masks = real_moves(seeds, venv.observer, venv.encoding)
    listens = actions == 0
    with pytest.raises(ValueError, match="need real moves where the therapist spoke"):
        regularise(m, uniform, 0.1, n_strategies=1, demos=(obs[listens], actions[listens], masks[listens]), real_coef=1.0)
    venv.close()


def test_real_moves_stand_for_every_step_of_an_episode(seeds):
    """Real states are observed at an episode's start (clock 0); :func:`random_clock` draws
    the clock (step / horizon, streak / 3) over the values the simulator shows and leaves the
    rest; behaviour cloning and the demonstration term draw it for every batch."""
    venv = GroupSupportVecEnv("couple", num_envs=2, seed=0)
    observer, encoding = venv.get_attr("observer")[0], venv.get_attr("encoding")[0]
    obs, actions, masks = real_moves(seeds, observer, encoding)
    col = observer.columns("tempo")
    assert (obs[:, col] == 0).all()
    drawn = random_clock(obs, observer, np.random.default_rng(0))
    steps, streaks = drawn[:, col.start] * observer.horizon, drawn[:, col.start + 1] * 3
    assert np.allclose(steps, np.round(steps)) and steps.min() >= 0 and steps.max() <= observer.horizon - 1 and len(np.unique(steps)) > 5
    assert set(np.round(streaks).tolist()) == {0.0, 1.0, 2.0, 3.0}
    keep = np.ones(obs.shape[1], bool)
    keep[col] = False
    assert np.array_equal(drawn[:, keep], obs[:, keep]) and (obs[:, col] == 0).all()  # a copy

    # behaviour cloning and the demonstration term see the drawn clocks, batch by batch
    m = MaskablePPO(PriorRegularisedPolicy, venv, n_steps=16, batch_size=16, seed=0, device="cpu", policy_kwargs={"net_arch": [16]})
    seen = []
    real_get = m.policy.get_distribution
    m.policy.get_distribution = lambda o, action_masks=None: (seen.append(o[:, col].numpy().copy()), real_get(o, action_masks=action_masks))[1]
    behaviour_clone(m, obs, actions, masks, epochs=2, observer=observer)
    regularise(m, None, 0.0, n_strategies=encoding.n_strategies, demos=(obs, actions, masks), demo_coef=1.0, observer=observer)
    m.policy.demo_nll()
    clocks = np.concatenate(seen)
    assert len(seen) > 2 and len(np.unique(clocks[:, 0])) > 5 and len(np.unique(clocks[:, 1])) == 4
    venv.close()


def test_simulated_moves_of_a_policy_that_never_speaks_are_undefined_not_zero():
    """No move in the simulator: nothing to agree with the prior on (nan, null in
    metrics.json), where 0 % would read as a policy that always disagrees."""

    class Listener:
        def predict(self, obs, action_masks=None, deterministic=True):
            return np.zeros(len(obs), dtype=np.int64), None

    venv = GroupSupportVecEnv("couple", num_envs=2, seed=0)
    sim = simulated_moves(Listener(), venv, 5, lambda o: np.ones((len(o), venv.action_space.n)))
    assert sim["moves"] == 0 and sim["target_roles"] == {} and math.isnan(sim["prior_target_r1"]) and math.isnan(sim["prior_strategy_r1"])
    venv.close()


def test_simulated_moves_keeps_the_observations_the_policy_answered():
    """``keep_observations``: the observations ``sim_vs_real.py`` classifies are exactly
    those the policy was asked to act on, step by step."""

    class Recorder:
        def __init__(self):
            self.asked: list[np.ndarray] = []

        def predict(self, obs, action_masks=None, deterministic=True):
            self.asked.append(np.asarray(obs, np.float32).copy())
            return np.array([int(np.flatnonzero(m)[-1]) for m in action_masks]), None  # always speak

    venv = GroupSupportVecEnv("couple", num_envs=2, seed=0)
    rec = Recorder()
    sim = simulated_moves(rec, venv, 6, keep_observations=True)
    assert sim["observations"].shape == (12, venv.observation_space.shape[0]) and sim["moves"] == 12
    assert np.array_equal(sim["observations"], np.concatenate(rec.asked))
    assert "observations" not in simulated_moves(rec, venv, 2)
    venv.close()
