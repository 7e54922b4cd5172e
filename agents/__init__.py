"""Therapist policies behind one small protocol (:class:`agents.base.TherapistAgent`):
never, random, heuristic, imitation, SB3 (PPO / MaskablePPO) and LLM therapists.
Build them by name with :func:`make_agent`."""

from agents.base import Ranking, TherapistAgent
from agents.registry import AGENT_NAMES, make_agent

__all__ = ["AGENT_NAMES", "Ranking", "TherapistAgent", "make_agent"]
