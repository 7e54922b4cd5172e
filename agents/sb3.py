"""Therapists backed by trained stable-baselines3 policies (sb3-contrib's MaskablePPO, PPO, A2C,
DQN, QR-DQN)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium import spaces as gym_spaces

from rescue_env.agents.base import PolicyError, PolicyFileNotFound, Ranking
from rescue_env.envs.common import Observer
from rescue_env.state import GroupState
from rescue_env.taxonomy.actions import ActionEncoding
from rescue_env.taxonomy.labels import patterns


def policy_encoding(model: Any, scenario: str | None = None) -> ActionEncoding | None:
    """The action encoding a trained policy acts in, read from its action count (each
    scenario and group cap has its own count, so the count names both; this is the
    ``env.max_members`` of the run that trained it). ``None`` when no encoding of
    ``scenario`` (of either scenario when ``None``) has that count."""
    n = getattr(model.action_space, "n", None)
    for scn in (scenario,) if scenario else ("couple", "family"):
        caps = range(2, 4) if scn == "couple" else range(2, 9)
        for cap in caps:
            enc = ActionEncoding(scn, cap)
            if enc.n_actions == n:
                return enc
    return None


def policy_scenario(model: Any) -> str | None:
    """The scenario a trained policy acts in, from its action count (None if unknown)."""
    enc = policy_encoding(model)
    return enc.scenario if enc is not None else None


from rescue_env.agents.algos import ALGOS, UNSUPPORTED_ALGOS, check_algo  # noqa: E402,F401  (re-exported)


def algo_class(algo: str) -> type:
    """The SB3 class of ``algo`` (a key of :data:`ALGOS`); a clear error for the others."""
    import importlib

    check_algo(algo)
    module, name, _ = ALGOS[algo]
    return getattr(importlib.import_module(module), name)


def load_policy(path: str | Path, algo: str | None = None):
    """Load a saved SB3 model; ``algo`` is a key of :data:`ALGOS` (guessed from the file when
    ``None``: the algorithm recorded in the archive's data, MaskablePPO first)."""
    p = Path(path)
    if not p.exists():
        raise PolicyFileNotFound(f"policy file {p} does not exist (train one with `rescue train`)")
    if algo is not None:
        return algo_class(algo).load(p, device="cpu")
    errors = []
    for name in ALGOS:
        try:
            return algo_class(name).load(p, device="cpu")
        except Exception as exc:  # an archive of another algorithm does not load as this one
            errors.append(f"{name}: {type(exc).__name__}")
    raise PolicyError(f"{p} is not a saved model of {', '.join(ALGOS)} ({'; '.join(errors)})")


class SB3Agent:
    """Acts with a trained policy on the env's observation; ranks through its action
    distribution (masked when the policy is maskable).

    Takes the Gymnasium env's ``Dict`` observation either way: a policy trained on flat
    vectors (``MlpPolicy`` on :class:`~rescue_env.envs.vec_env.GroupSupportVecEnv`, what
    ``rescue train`` does) gets it flattened; a ``MultiInputPolicy`` gets it as is.
    """

    def __init__(self, model: Any, scenario: str, encoding: ActionEncoding | None = None, *, deterministic: bool = True, name: str = "policy", horizon: int = 30):
        self.model = model
        self.scenario = scenario
        own = policy_encoding(model, scenario)
        if own is None:
            other = policy_scenario(model)
            what = f"a {other} policy" if other else f"a policy of {getattr(model.action_space, 'n', '?')} actions"
            raise PolicyError(f"this is {what}; it cannot act in the {scenario} scenario (train one with env={scenario})")
        if encoding is not None and encoding.n_actions != own.n_actions:
            raise PolicyError(f"policy acts on {own.n_actions} actions (groups of at most {own.max_members}), the env has {encoding.n_actions}: set env.max_members={own.max_members} as in the run that trained it")
        #: the encoding the policy acts in (its group cap: ``env.max_members`` of its run)
        self.encoding = own
        self.deterministic = deterministic
        self.name = name
        self.maskable = type(model).__name__ == "MaskablePPO"
        self.observer = Observer(self.encoding, patterns(scenario), horizon)
        space = model.observation_space
        self.flat = isinstance(space, gym_spaces.Box)
        if self.flat and space.shape != self.observer.flat_space.shape:
            raise PolicyError(f"policy takes observations of shape {space.shape}, the {scenario} env with groups of at most {own.max_members} gives {self.observer.flat_space.shape}: trained with another observation layout; retrain it")

    def reset(self, *, seed: int | None = None) -> None:
        pass

    def _prepare(self, observation: Any) -> Any:
        if self.flat and isinstance(observation, dict):
            return self.observer.flatten(observation)
        return observation

    def act(self, observation: Any, action_mask: np.ndarray, state: GroupState | None = None) -> int:
        observation = self._prepare(observation)
        if self.maskable:
            action, _ = self.model.predict(observation, action_masks=action_mask.astype(bool), deterministic=self.deterministic)
            return int(action)
        action, _ = self.model.predict(observation, deterministic=self.deterministic)
        if action_mask[int(action)]:
            return int(action)
        # a plain PPO policy knows no mask: fall back on its best valid action
        return int(np.argmax(self.action_probs(observation, action_mask)))

    def action_probs(self, observation: dict[str, np.ndarray], mask: np.ndarray | None = None) -> np.ndarray:
        """The policy's distribution over flat actions, restricted to ``mask`` when given
        (value-based models: a softmax of their Q-values)."""
        obs_tensor, _ = self.model.policy.obs_to_tensor(self._prepare(observation))
        if not hasattr(self.model.policy, "get_distribution"):
            return self._q_probs(obs_tensor, mask)
        with torch.no_grad():
            dist = self.model.policy.get_distribution(obs_tensor)
            if self.maskable and mask is not None:
                dist.apply_masking(mask.astype(bool)[None, :])
            probs = dist.distribution.probs[0].cpu().numpy().astype(np.float64)
        if mask is not None and not self.maskable:
            probs = probs * mask
            probs = probs / probs.sum() if probs.sum() > 0 else mask / mask.sum()
        return probs

    def _q_probs(self, obs_tensor: Any, mask: np.ndarray | None) -> np.ndarray:
        """Softmax of a DQN's (or QR-DQN's mean quantile) Q-values over the valid actions."""
        policy = self.model.policy
        with torch.no_grad():
            if hasattr(policy, "quantile_net"):
                q = policy.quantile_net(obs_tensor).mean(dim=1)
            else:
                q = policy.q_net(obs_tensor)
        q = q[0].cpu().numpy().astype(np.float64)
        if mask is not None:
            q = np.where(mask.astype(bool), q, -np.inf)
        q = q - q.max()
        probs = np.exp(q)
        return probs / probs.sum()

    def rank(self, state: GroupState, encoding: ActionEncoding) -> Ranking:
        """Speak probability, targets and strategies in ``state``, on ``encoding``'s target
        options (the policy may have a larger cap: a policy trained on groups of up to three
        ranks a couple of two; each of its options maps to the option addressing the same
        members). ``ValueError`` when the group is larger than the policy's cap."""
        if state.n > self.encoding.max_members:
            raise ValueError(f"the policy sees groups of at most {self.encoding.max_members} members; this {state.scenario} has {state.n}")
        obs = self.observer.observe_state(state)
        probs = self.action_probs(obs, self.encoding.mask(state.n))
        p_speak, tp_own, sp = self.encoding.marginals(probs)
        if encoding.n_targets == self.encoding.n_targets:
            return Ranking(p_speak, tp_own, sp)
        tp = np.zeros(encoding.n_targets)
        for t in np.flatnonzero(self.encoding.target_mask(state.n)):
            tp[encoding.target_for_slots(self.encoding.target_slots(int(t), state.n), state.n)] += tp_own[t]
        return Ranking(p_speak, tp, sp)
