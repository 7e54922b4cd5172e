"""The LLM relation-pattern annotator: labels ρ_t from the latest turns of a simulated session
with the scenario's taxonomy and this project's definitions (``dynamics.annotator=llm``)."""

from __future__ import annotations

from collections.abc import Sequence

from rescue_env.llm import prompts
from rescue_env.llm.client import LLMClient
from rescue_env.llm.errors import LLMCallFailed
from rescue_env.llm.tokens import Prompt


class LLMAnnotator:
    """Asks the LLM which relation pattern holds after a step.

    Args:
        client: the run's LLM client.
        scenario: ``"couple"`` or ``"family"`` (picks the taxonomy).
        window: transcript lines shown (the most recent).
    """

    def __init__(self, client: LLMClient, scenario: str, *, window: int = 12) -> None:
        self.client = client
        self.scenario = scenario
        self.window = window
        self.schema = prompts.pattern_schema(scenario)

    async def label(
        self,
        members: Sequence[str],
        lines: Sequence[str],
        previous: str | None,
        *,
        seed: int | None = None,
        tag: str | None = None,
    ) -> str | None:
        """The pattern label after ``lines`` (None: no clear pattern); raises
        :class:`~rescue_env.llm.errors.LLMCallFailed` when the call fails for good."""
        prompt = Prompt(
            lambda window: prompts.annotator_messages(self.scenario, members, prompts.transcript_block(lines, window), previous),
            self.window,
        )
        result = await self.client.complete_json(prompt, self.schema, name="relation_pattern", seed=seed, tag=tag)
        if not result.ok or result.data is None:
            raise LLMCallFailed("pattern annotator", result.error)
        label = result.data["pattern"]
        return None if label == prompts.NO_PATTERN else label
