"""The failure an LLM-driven episode stops on."""

from __future__ import annotations

from rescue_env.rollout import EpisodeFailed


class LLMCallFailed(EpisodeFailed):
    """An LLM call an episode depends on failed for good: after the client layer's retries
    (429, 5xx, timeouts, connection errors, replies without choices or cut short) and its
    re-asks (``llm.reasks``, for answers that fail the schema).

    The episode runners (:func:`rescue_env.rollout.run_episode`, :func:`~rescue_env.rollout.arun_episode`)
    record the episode as failed with this message and go on with the others.
    """

    def __init__(self, role: str, reason: str) -> None:
        super().__init__(f"{role}: {reason}")
        self.role = role
        self.reason = reason
