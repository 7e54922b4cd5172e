"""Build therapist agents by name (the names configs and the CLI use)."""

from __future__ import annotations

from typing import Any, Sequence

from rescue_env.agents.base import PolicyError
from rescue_env.data.schema import Dialogue
from rescue_env.taxonomy.actions import ActionEncoding

AGENT_NAMES = ("never", "random", "heuristic", "imitation", "ppo", "maskable_ppo", "policy", "llm")
#: the agents that act with a trained policy file (``policy``: whichever algorithm saved it)
LEARNED_AGENTS = ("ppo", "maskable_ppo", "policy")
#: old names still accepted, with a deprecation message: old name -> name
DEPRECATED_NAMES = {"trained": "policy"}


def make_agent(
    name: str,
    scenario: str,
    *,
    encoding: ActionEncoding | None = None,
    seed: int | None = None,
    imitation_data: Sequence[Dialogue] | None = None,
    policy: str | None = None,
    prior: str | None = None,
    fit_data: Any = None,
    deterministic: bool = True,
    horizon: int = 30,
    **kwargs: Any,
):
    """An agent of the :class:`~rescue_env.agents.base.TherapistAgent` protocol.

    ``imitation``: the behaviour prior (:mod:`rescue_env.agents.prior`) read from the file ``prior``,
    else fitted on ``imitation_data`` (dialogues), else on ``fit_data`` (any form
    ``data.path`` takes), else on the bundled seeds;
    ``policy`` is a trained SB3 ``.zip`` for ``ppo`` / ``maskable_ppo`` / ``policy`` (its
    algorithm read from the file; ``trained`` is its deprecated name);
    ``llm`` takes ``client=`` (an :class:`rescue_env.llm.LLMClient`) among ``kwargs``.
    """
    given, encoding = encoding, encoding or ActionEncoding(scenario)
    if name in DEPRECATED_NAMES:
        import warnings

        warnings.warn(f"agent {name!r} is now called {DEPRECATED_NAMES[name]!r}; the old name will go", FutureWarning, stacklevel=2)
        name = DEPRECATED_NAMES[name]
    if name == "never":
        from rescue_env.agents.simple import NeverAgent

        return NeverAgent()
    if name == "random":
        from rescue_env.agents.simple import RandomAgent

        return RandomAgent(seed)
    if name == "heuristic":
        from rescue_env.agents.heuristic import HeuristicAgent

        return HeuristicAgent(scenario, encoding, **kwargs)
    if name == "imitation":
        from rescue_env.agents.prior import BehaviourPrior, PriorAgent

        if prior:
            model = BehaviourPrior.load(prior)
        else:
            from rescue_env.data import load_dialogues

            if imitation_data is None:
                imitation_data = load_dialogues(fit_data) if fit_data else load_dialogues()
            model = BehaviourPrior.fit(imitation_data, [scenario])
        # it samples its moves (a behaviour policy); its rank() is what the tasks score
        return PriorAgent(model, scenario, encoding, seed=seed)
    if name in LEARNED_AGENTS:
        from rescue_env.agents.sb3 import SB3Agent, load_policy

        if not policy:
            raise PolicyError(f"agent {name!r} needs a trained policy file: set agent.policy=PATH.zip (or policy=PATH.zip for rollout)")
        model = load_policy(policy, None if name == "policy" else name)
        # without an env's encoding the policy's own (its group cap) is used
        return SB3Agent(model, scenario, given, deterministic=deterministic, name=name, horizon=horizon)
    if name == "llm":
        try:
            from rescue_env.agents.llm import LLMTherapist
        except ImportError as e:
            raise ValueError("the LLM therapist is not available in this install") from e
        return LLMTherapist(scenario, encoding, **kwargs)
    raise ValueError(f"unknown agent {name!r}; choose from {list(AGENT_NAMES)}")
