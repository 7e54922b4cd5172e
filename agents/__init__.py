"""Therapist policies behind one small protocol (:class:`agents.base.TherapistAgent`)."""

from agents.base import Ranking, TherapistAgent

__all__ = ["Ranking", "TherapistAgent"]
