"""Behaviour-regularised training: MaskablePPO held close to the real therapists' moves.

``rescue train experiment=grounded`` (``experiments/train.py``) does, in order:

1. fits the behaviour prior π_prior (:mod:`rescue_env.agents.prior`) on the training dialogues, or
   reads ``prior.path``;
2. **behaviour cloning** (:func:`behaviour_clone`): the policy network is trained by
   maximum likelihood on the real therapists' moves (the state after each client row → listen,
   or speak to this target with this strategy), on the env's masks;
3. PPO on σ* with a penalty toward π_prior on the same masks, factored by the chain rule
   KL(π ‖ π_prior) = KL_speak + π(speak) · (KL_target + KL_strategy) (:func:`prior_kl_terms`):
   ``prior.coef · KL_target + prior.strategy_coef · KL_strategy + prior.speak_coef ·
   KL_speak``; ``prior.strategy_coef`` null is ``prior.coef``, and the first two terms are
   then ``prior.coef · KL(π(·|speak) ‖ π_prior(·|speak))``. ``experiment=grounded`` sets it
   to a tenth of ``prior.coef`` and ``prior.real_coef`` (step 5) equal to it, so that
   ``prior.coef`` alone moves along the frontier;
4. optionally (``prior.demo_coef``) DAPG's **demonstration term**: ``prior.demo_coef ·`` the
   negative log-likelihood, given speaking, of a fresh minibatch of the training dialogues'
   real moves at every PPO minibatch (:meth:`PriorRegularisedPolicy.demo_nll`). The KL holds
   the policy to π_prior on the states the simulator visits, through the prior's reading of
   an observation (part of the turn at its training mean); the demonstration term holds it
   to the therapists' own moves on the real states, so what the behaviour cloning of step 2
   taught is not trained away by σ*.
5. optionally (``prior.real_coef``) ``prior.real_coef · KL_target`` on a draw of the real
   moves' states (:meth:`PriorRegularisedPolicy.real_kl`): the prior's answer of whom to
   address, not one group's moves, on the states the simulator never shows (right after the
   therapist's own row). The target only: taken on real states the strategy term pulled the
   policy's strategies in the simulator toward the prior's too, and cost σ* (the README's
   frontier).

**Why factored.** *Whom* and *how* a therapist addresses is what the prior knows well (STP,
SSP above the majority baseline on held-out real groups); *whether* they speak after a
client's turn it barely knows (ITP AUC about 0.55 with the turn; on the simulator's
observations π_prior(speak) stays near ~0.5). The whole KL
pulls π(speak) toward that coin flip, and a deterministic policy near a prior that spreads
its speaking half over ~30 moves always takes "listen" (mass 0.5 against at most ~0.2 for
any one move): with the whole KL every coefficient ≥ 0.03 fell below the heuristic on σ*.
The factored penalty holds the move given speaking to the prior (which is what STP/SSP rank,
:meth:`~rescue_env.taxonomy.ActionEncoding.marginals` conditions on speaking) and leaves
when to speak to σ* (``prior.speak_coef``, 0 by default, puts the speak term back).
KL_target and KL_strategy are not weighted by π(speak): weighted, a policy could escape the
penalty by listening. ``prior.strategy_coef`` weighs the strategy apart from the target:
on the real slices the σ* a policy gains over the heuristic comes mostly from its strategies
(the README's frontier), so the two trade off differently against agreement.

**A loss term, not reward shaping.** Shaping the reward with ``coef · log π_prior(a|s)``
regularises toward the prior only in expectation over sampled actions, adds variance to
the advantages, and mixes the penalty into the σ* returns that the runs report and compare;
the KL as a loss term is exact on every visited state (all actions at once, through the
masked distribution), leaves σ* untouched, and is what piKL and human-regularised PPO use.
It enters MaskablePPO's own loss through its entropy slot: PPO's entropy bonus is a KL to
the uniform policy up to a constant, and :class:`PriorRegularisedPolicy` returns
``ent_coef · H(π) − penalty`` where MaskablePPO reads the entropy, with the algorithm's
``ent_coef`` set to 1. So the loss is exactly PPO's plus the penalty, and
MaskablePPO's ``train()`` runs unchanged (no copy of it to keep in step with sb3-contrib);
the saved model loads as a plain ``MaskablePPO`` (the prior is not saved with it).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

from rescue_env.agents.prior import BehaviourPrior, real_decisions
from rescue_env.data.schema import Dialogue
from rescue_env.taxonomy.actions import ActionEncoding

#: obs (B, D) float32 numpy → prior probabilities over the flat actions (B, A)
PriorFn = Callable[[np.ndarray], np.ndarray]


def prior_kl_terms(probs: th.Tensor, prior: th.Tensor, mask: th.Tensor | None, n_strategies: int) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
    """``(kl_speak, kl_target, kl_strategy)`` per row, both distributions restricted to
    ``mask`` (π_prior renormalised on it; π is already masked: zero outside). Action 0 keeps
    listening; action ``1 + t · n_strategies + s`` speaks to target ``t`` with strategy ``s``.

    - ``kl_speak`` = KL(Bernoulli(π(speak)) ‖ Bernoulli(π_prior(speak)));
    - ``kl_target`` = KL(π(t|speak) ‖ π_prior(t|speak));
    - ``kl_strategy`` = Σ_t π(t|speak) · KL(π(s|t, speak) ‖ π_prior(s|t, speak)).

    By the chain rule, KL(π(·|speak) ‖ π_prior(·|speak)) = ``kl_target + kl_strategy`` and
    KL(π ‖ π_prior) = ``kl_speak + π(speak) · (kl_target + kl_strategy)``.
    """
    if mask is not None:
        prior = prior * mask
    prior = prior / prior.sum(dim=1, keepdim=True).clamp_min(1e-12)
    tiny = 1e-12

    def kl(p: th.Tensor, q: th.Tensor) -> th.Tensor:  # over the last axis; 0·log 0 = 0
        p, q = p / p.sum(dim=-1, keepdim=True).clamp_min(tiny), q / q.sum(dim=-1, keepdim=True).clamp_min(tiny)
        return th.where(p > 0, p * (th.log(p.clamp_min(tiny)) - th.log(q.clamp_min(tiny))), th.zeros_like(p)).sum(dim=-1)

    pi_s, q_s = 1 - probs[:, 0], 1 - prior[:, 0]
    kl_speak = kl(th.stack([pi_s, probs[:, 0]], dim=1), th.stack([q_s, prior[:, 0]], dim=1))
    grid, q_grid = probs[:, 1:].reshape(len(probs), -1, n_strategies), prior[:, 1:].reshape(len(prior), -1, n_strategies)
    pi_t = grid.sum(dim=2)
    kl_target = kl(pi_t, q_grid.sum(dim=2))
    kl_strategy = (pi_t / pi_t.sum(dim=1, keepdim=True).clamp_min(tiny) * kl(grid, q_grid)).sum(dim=1)
    return kl_speak, kl_target, kl_strategy


class PriorRegularisedPolicy(MaskableActorCriticPolicy):
    """MaskablePPO's MLP policy whose ``evaluate_actions`` returns, in the entropy's place,
    ``ent_coef · H(π) − kl_coef · kl_target − strategy_coef · kl_strategy − speak_coef ·
    kl_speak`` (see the module docstring and :func:`prior_kl_terms`). Without a
    prior (:meth:`set_prior` not called, e.g. after loading) it is the plain policy."""

    prior_fn: PriorFn | None = None
    kl_coef: float = 0.0
    speak_coef: float = 0.0
    strategy_coef: float = 0.0
    n_strategies: int = 1
    #: PPO's entropy weight once :func:`regularise` moved it into the policy (None: not moved,
    #: the entropy slot holds the plain entropy)
    base_ent_coef: float | None = None
    #: mean KL(π ‖ π_prior) of the last minibatch (the whole KL, for logs)
    last_kl: float = float("nan")
    #: the real training moves (:meth:`set_demos`): obs, action, mask of every decision, or None
    demos: tuple[np.ndarray, th.Tensor, np.ndarray] | None = None
    #: indices of ``demos`` where the therapist spoke (what the demonstration term draws)
    demo_spoke: np.ndarray | None = None
    demo_observer: Any = None
    demo_coef: float = 0.0
    demo_batch: int = 64
    demo_rng: np.random.Generator | None = None
    #: weight of KL_target on a draw of the real moves' states (:meth:`real_kl`; 0: off)
    real_coef: float = 0.0
    #: π_prior on each real state of ``demos``, computed once (the prior does not read the
    #: episode clock that each draw redraws)
    demo_prior: th.Tensor | None = None
    #: the real moves' mean negative log-likelihood in the last minibatch (for logs)
    last_demo_nll: float = float("nan")
    #: the mean KL_target on the last draw of real states (for logs)
    last_real_kl: float = float("nan")

    def set_prior(self, prior_fn: PriorFn, kl_coef: float, ent_coef: float, n_strategies: int, speak_coef: float = 0.0, strategy_coef: float | None = None) -> None:
        self.prior_fn, self.kl_coef, self.base_ent_coef = prior_fn, float(kl_coef), float(ent_coef)
        self.n_strategies, self.speak_coef = int(n_strategies), float(speak_coef)
        self.strategy_coef = self.kl_coef if strategy_coef is None else float(strategy_coef)
        self.demo_prior = None  # computed anew for this prior on the real states

    def set_demos(self, obs: np.ndarray, actions: np.ndarray, masks: np.ndarray, coef: float, *, batch: int = 64, seed: int = 0, observer: Any = None,
                  real_coef: float = 0.0) -> None:
        """Hold the real training moves ``obs``/``actions``/``masks`` (:func:`real_moves`)
        for two terms, each drawn afresh (``batch`` moves) for every PPO minibatch:

        - ``coef ·`` the mean negative log-likelihood given speaking (:meth:`demo_nll`) of
          moves where the therapist spoke: DAPG's demonstration term, on the real states
          themselves where the KL penalty sees only the simulator's;
        - with ``real_coef`` > 0 (and a prior, :meth:`set_prior`), ``real_coef ·`` KL_target
          on the same moves' states (:meth:`real_kl`): the policy addresses whom π_prior
          would where the simulator never goes (right after the therapist's own row).

        With the env's ``observer``, each draw's episode clock is drawn afresh
        (:func:`random_clock`)."""
        speak = np.flatnonzero(np.asarray(actions) > 0)
        if not len(speak):
            raise ValueError("the demonstration term and prior.real_coef need real moves where the therapist spoke; the training dialogues have none")
        self.demos = (np.asarray(obs, np.float32), th.as_tensor(actions, device=self.device), np.asarray(masks, bool))
        self.demo_spoke, self.demo_observer, self.real_coef = speak, observer, float(real_coef)
        self.demo_coef, self.demo_batch, self.demo_rng = float(coef), int(batch), np.random.default_rng(seed)
        self.demo_prior = None

    def _draw_real(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, th.Tensor, np.ndarray]:
        """``(index, obs, action, mask)`` of a fresh draw of ``demo_batch`` of the real
        moves at ``rows`` (indices into :attr:`demos`), their episode clock drawn."""
        assert self.demos is not None and self.demo_rng is not None
        obs, actions, masks = self.demos
        idx = rows[self.demo_rng.integers(len(rows), size=min(self.demo_batch, len(rows)))]
        o = obs[idx] if self.demo_observer is None else random_clock(obs[idx], self.demo_observer, self.demo_rng)
        return idx, o, actions[idx], masks[idx]

    def demo_nll(self) -> th.Tensor:
        """The mean negative log-likelihood, given speaking, of a fresh minibatch of the real
        moves: −log π(a | speak) = −log π(a) + log π(speak). Like the factored KL, the term
        holds whom and how to the therapists and leaves when to speak to σ*."""
        assert self.demo_spoke is not None
        _, o, actions, masks = self._draw_real(self.demo_spoke)
        dist = self.get_distribution(th.as_tensor(o, device=self.device), action_masks=masks)
        log_p = th.log_softmax(dist.distribution.logits, dim=1)
        speak = th.logsumexp(log_p[:, 1:], dim=1)
        return -(log_p.gather(1, actions[:, None])[:, 0] - speak).mean()

    def real_kl(self) -> th.Tensor:
        """``kl_target`` (:func:`prior_kl_terms`: KL(π(t|speak) ‖ π_prior(t|speak))) averaged
        over a fresh draw of the real moves' states (where the therapist spoke: what STP asks
        about; the states where it kept listening are like the simulator's)."""
        assert self.demos is not None and self.prior_fn is not None
        if self.demo_prior is None:
            self.demo_prior = th.as_tensor(self.prior_fn(self.demos[0]), dtype=th.float32, device=self.device)
        assert self.demo_spoke is not None
        idx, o, _, masks = self._draw_real(self.demo_spoke)
        dist = self.get_distribution(th.as_tensor(o, device=self.device), action_masks=masks)
        probs = dist.distribution.probs
        prior = self.demo_prior[th.as_tensor(idx, device=self.device)]
        _, kl_target, _ = prior_kl_terms(probs, prior, th.as_tensor(masks, dtype=th.float32, device=probs.device), self.n_strategies)
        kl = kl_target.mean()
        self.last_real_kl = float(kl.detach())
        return kl

    def evaluate_actions(self, obs: th.Tensor, actions: th.Tensor, action_masks: th.Tensor | None = None):
        features = self.extract_features(obs)
        if self.share_features_extractor:
            latent_pi, latent_vf = self.mlp_extractor(features)
        else:
            latent_pi = self.mlp_extractor.forward_actor(features[0])
            latent_vf = self.mlp_extractor.forward_critic(features[1])
        dist = self._get_action_dist_from_latent(latent_pi)
        mask = None
        if action_masks is not None:
            dist.apply_masking(action_masks)
            mask = th.as_tensor(action_masks, dtype=th.float32, device=latent_pi.device).reshape(len(latent_pi), -1)
        log_prob, values, entropy = dist.log_prob(actions), self.value_net(latent_vf), dist.entropy()
        if self.base_ent_coef is None:
            return values, log_prob, entropy
        slot = self.base_ent_coef * entropy
        if self.prior_fn is not None:
            prior = th.as_tensor(self.prior_fn(obs.detach().cpu().numpy()), dtype=th.float32, device=latent_pi.device)
            probs = dist.distribution.probs
            kl_speak, kl_target, kl_strategy = prior_kl_terms(probs, prior, mask, self.n_strategies)
            self.last_kl = float((kl_speak + (1 - probs[:, 0]) * (kl_target + kl_strategy)).mean().detach())
            slot = slot - (self.kl_coef * kl_target + self.strategy_coef * kl_strategy + self.speak_coef * kl_speak)
        # last: SB3's action distribution is one object that get_distribution refills;
        # each term below is a scalar: the slot's mean carries it into the loss
        if self.demos is not None and self.demo_coef > 0:
            nll = self.demo_nll()
            self.last_demo_nll = float(nll.detach())
            slot = slot - self.demo_coef * nll
        if self.demos is not None and self.real_coef > 0 and self.prior_fn is not None:
            slot = slot - self.real_coef * self.real_kl()
        return values, log_prob, slot


def regularise(model: Any, prior_fn: PriorFn | None, coef: float, *, n_strategies: int, speak_coef: float = 0.0, strategy_coef: float | None = None,
               demos: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None, demo_coef: float = 0.0, seed: int = 0, observer: Any = None,
               real_coef: float = 0.0) -> None:
    """Make ``model`` (a MaskablePPO built with :class:`PriorRegularisedPolicy`, on an
    encoding of ``n_strategies`` strategies) minimise PPO's loss + ``coef · kl_target +
    strategy_coef · kl_strategy + speak_coef · kl_speak`` (:func:`prior_kl_terms`;
    ``strategy_coef`` defaults to ``coef``: then the first two are ``coef ·
    KL(π(·|speak) ‖ π_prior(·|speak))``) + ``demo_coef ·`` the negative log-likelihood of
    the real moves ``demos`` (``(obs, action, mask)`` of :func:`real_moves`; a fresh
    minibatch of them per PPO minibatch, drawn with ``seed``, their episode clock drawn too
    when the env's ``observer`` is given: :func:`random_clock`); ``real_coef ·``
    KL_target on a draw of the states of ``demos``' moves per minibatch
    (:meth:`PriorRegularisedPolicy.real_kl`; 0: off). Its entropy weight moves into the policy.
    ``prior_fn`` may be None when only the demonstration term is on."""
    if not isinstance(model.policy, PriorRegularisedPolicy):
        raise TypeError("the KL penalty needs a MaskablePPO built with policy=PriorRegularisedPolicy")
    if real_coef < 0:
        raise ValueError(f"real_coef must be >= 0, got {real_coef}")
    if real_coef > 0 and (prior_fn is None or demos is None):
        raise ValueError("the KL penalty on real states needs a prior and the real moves (demos)")
    if prior_fn is not None:
        model.policy.set_prior(prior_fn, coef, model.ent_coef, n_strategies, speak_coef, strategy_coef)
    model.policy.base_ent_coef = float(model.ent_coef)
    if demos is not None and (demo_coef > 0 or real_coef > 0):
        model.policy.set_demos(*demos, demo_coef, seed=seed, observer=observer, real_coef=real_coef)
    model.ent_coef = 1.0


def prior_on_obs(prior: BehaviourPrior, observer: Any, encoding: ActionEncoding) -> PriorFn:
    """π_prior on the flat observations of an env with this ``observer`` and ``encoding``."""
    return lambda obs: prior.action_probs_from_obs(obs, observer, encoding)


def random_clock(obs: np.ndarray, observer: Any, rng: np.random.Generator) -> np.ndarray:
    """A copy of real moves' flat observations with the episode clock (``tempo``: the step
    over the horizon, the therapist's streak of interventions over 3) drawn uniformly.

    A real state is observed as an episode's start (step 0, no streak: how the simulator
    starts from a seed cut), but the simulator asks for moves at every step. Cloned or
    held at step 0 only, a policy is taught the therapists' moves where it makes 1/horizon of
    its decisions and may do anything at the others (and can tell real states from simulated
    ones by the clock alone: ``benchmarks/sim_vs_real.py``). A therapist's move does not
    depend on the simulator's truncation clock, so each real move stands for every step."""
    out = np.array(obs, np.float32, copy=True)
    col = observer.columns("tempo").start
    out[:, col] = rng.integers(0, observer.horizon, len(out)) / observer.horizon
    out[:, col + 1] = rng.integers(0, 4, len(out)) / 3.0
    return out


def real_moves(dialogues: Sequence[Dialogue], observer: Any, encoding: ActionEncoding, *, after_therapist: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(obs[N, D], action[N], mask[N, A])``: each decision after a client row in the
    dialogues of ``encoding``'s scenario, as the env would show it, and what the therapist did
    (0 = kept listening); with ``after_therapist`` also each move right after the therapist's
    own row. Moves whose strategy is outside the taxonomy, or groups larger than the
    encoding, are left out.

    The simulator never shows a state after the therapist's own row (its therapist decides
    after clients spoke), but STP and SSP ask about them (38 of 177 real couple moves), and
    there therapists go on with whom they addressed; behaviour cloning and the demonstration
    term are the only teachers of those states, so they include them. ``after_therapist=False``
    keeps the decisions the simulator can show (``benchmarks/sim_vs_real.py``)."""
    from gymnasium import spaces

    dec = real_decisions(dialogues, encoding.scenario)
    obs, acts, masks = [], [], []
    for st, speak, slots, s in zip(dec.states, dec.speak, dec.target, dec.strategy):
        if st.n > encoding.max_members or (speak < 0 and not after_therapist) or (speak != 0 and (not slots or s < 0)):
            continue
        a = 0 if speak == 0 else encoding.encode(encoding.target_for_slots(slots, st.n), s)
        obs.append(spaces.flatten(observer.space, observer.observe_state(st)))
        acts.append(a)
        masks.append(encoding.mask(st.n))
    if not obs:
        raise ValueError(f"no {encoding.scenario} therapist decision to clone in the training dialogues")
    return np.array(obs, np.float32), np.array(acts), np.array(masks, bool)


def behaviour_clone(model: Any, obs: np.ndarray, actions: np.ndarray, masks: np.ndarray, *, epochs: int, batch_size: int = 64, lr: float = 1e-3, seed: int = 0,
                    observer: Any = None) -> list[float]:
    """Train ``model.policy`` (a maskable actor-critic) to maximise the likelihood of the
    real ``actions`` on their masks; returns the mean negative log-likelihood per epoch.
    With the env's ``observer``, each minibatch's episode clock is drawn afresh
    (:func:`random_clock`)."""
    policy = model.policy
    policy.set_training_mode(True)
    params = [p for n, p in policy.named_parameters() if "value_net" not in n and "mlp_extractor.value_net" not in n]
    opt = th.optim.Adam(params, lr=lr)
    rng = np.random.default_rng(seed)
    losses = []
    for _ in range(epochs):
        order = rng.permutation(len(actions))
        total = 0.0
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            o = th.as_tensor(obs[idx] if observer is None else random_clock(obs[idx], observer, rng), device=policy.device)
            dist = policy.get_distribution(o, action_masks=masks[idx])
            nll = -dist.log_prob(th.as_tensor(actions[idx], device=policy.device)).mean()
            opt.zero_grad()
            nll.backward()
            opt.step()
            total += float(nll.detach()) * len(idx)
        losses.append(total / len(order))
    policy.set_training_mode(False)
    return losses


def simulated_moves(model: Any, venv: Any, steps: int, prior_fn: PriorFn | None = None, *, keep_observations: bool = False) -> dict[str, Any]:
    """How ``model`` (deterministic) moves in the simulator: ``steps`` steps of each of
    ``venv``'s sessions (a :class:`~rescue_env.envs.vec_env.GroupSupportVecEnv`, reset first).

    Returns ``moves`` (times it spoke), ``target_roles`` and ``strategies`` (% of the moves;
    roles: ``speaker1`` the client who spoke last, ``other`` another single member, ``dyad``,
    ``group``) and, with ``prior_fn``, ``prior_target_r1`` / ``prior_strategy_r1``: % of the
    moves whose target / strategy is π_prior's most probable one given speaking on that
    observation (nan when it never spoke). STP/SSP on real dialogues say how the policy
    answers real states; these say whether it acts the same where it earns its σ* (a policy
    held to the therapists only on real states can address the client who spoke on those and
    the whole group in the simulator). With ``keep_observations``, ``observations`` holds
    every observation the policy answered, ``(steps · num_envs, obs_dim)`` float32 (what
    ``benchmarks/sim_vs_real.py`` sets against the real decisions' observations)."""
    from collections import Counter

    observer, encoding = venv.observer, venv.encoding
    T, S = encoding.n_targets, encoding.n_strategies
    roles: Counter[str] = Counter()
    strategies: Counter[str] = Counter()
    hits = np.zeros(2)
    moves = 0
    kept: list[np.ndarray] = []
    obs = venv.reset()
    for _ in range(steps):
        if keep_observations:
            kept.append(np.asarray(obs, np.float32))
        masks = venv.action_masks()
        actions, _ = model.predict(obs, action_masks=masks, deterministic=True)
        parts = observer.unflatten_batch(np.asarray(obs, np.float64))
        prior = None
        if prior_fn is not None:
            grid = (prior_fn(np.asarray(obs, np.float32)) * masks)[:, 1:].reshape(len(obs), T, S)
            prior = grid.sum(axis=2).argmax(axis=1), grid.sum(axis=1).argmax(axis=1)
        for e, a in enumerate(actions):
            d = encoding.decode(int(a))
            if not d.intervene:
                continue
            moves += 1
            n = int(round(parts["present"][e].sum()))
            slots = encoding.target_slots(d.target, n)
            last = int(np.argmax(parts["speaker"][e])) if parts["speaker"][e].sum() > 0 else -1
            roles["group" if len(slots) >= n else "dyad" if len(slots) == 2 else "speaker1" if slots[0] == last else "other"] += 1
            strategies[encoding.strategy_names[d.strategy]] += 1
            if prior is not None:
                hits += (prior[0][e] == d.target, prior[1][e] == d.strategy)
        obs, _, _, _ = venv.step(actions)
    share = lambda c: {k: 100.0 * v / max(moves, 1) for k, v in c.most_common()}  # noqa: E731
    out: dict[str, Any] = {"moves": moves, "target_roles": share(roles), "strategies": share(strategies)}
    if prior_fn is not None:
        # undefined (nan; null in metrics.json) for a policy that never spoke, not 0 %
        out["prior_target_r1"], out["prior_strategy_r1"] = (100.0 * hits / moves).tolist() if moves else (math.nan, math.nan)
    if keep_observations:
        out["observations"] = np.concatenate(kept) if kept else np.zeros((0, *observer.flat_space.shape), np.float32)
    return out

