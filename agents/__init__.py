"""Therapist policies behind one small protocol (:class:`rescue_env.agents.base.TherapistAgent`):
never, random, heuristic, imitation, SB3 (PPO / MaskablePPO) and LLM therapists.
Build them by name with :func:`make_agent`."""

from rescue_env.agents.base import Ranking, TherapistAgent
from rescue_env.agents.registry import AGENT_NAMES, make_agent

__all__ = ["AGENT_NAMES", "Ranking", "TherapistAgent", "make_agent"]
