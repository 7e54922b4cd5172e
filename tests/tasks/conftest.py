"""Fixtures for the task evaluators: the real subset (skipped when ``shared/`` is absent),
the bundled seeds, small hand-built dialogues, and fast stand-ins for the ER/VP scorers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rescue_env.data import load_dialogues
from rescue_env.data.loader import parse_dialogue
from rescue_env.data.schema import Dialogue
from rescue_env.tasks.scorers import EmbeddingJudge, LexicalSimilarity

SHARED = Path(__file__).resolve().parents[2] / ".." / "shared"
SUBSET = SHARED / "data" / "rescue-bench-subset" / "benchmark_subset.jsonl"


@pytest.fixture(scope="session")
def subset() -> list[Dialogue]:
    """The 10 real dialogues (9 couple, 1 family); skips when ``../shared`` is absent."""
    if not SUBSET.exists():
        pytest.skip(f"the real subset is not here ({SUBSET})")
    return load_dialogues(SUBSET)


@pytest.fixture(scope="session")
def seeds() -> list[Dialogue]:
    """The bundled seed dialogues."""
    return load_dialogues()


def make_dialogue(rows: list[dict[str, Any]], *, sample_id: str = "toy/s1", participants: list[str] | None = None, scenario: str | None = None) -> Dialogue:
    """A dialogue from short row dicts (``primary_speaker`` at least); rows get 1-based
    ``row_index`` and every field is parsed by the real loader."""
    obj: dict[str, Any] = {"sample_id": sample_id, "rows": []}
    if participants is not None:
        obj["participants"] = participants
    if scenario is not None:
        obj["scenario"] = scenario
    for i, r in enumerate(rows, start=1):
        row = {"dialogue_cleaned": "one two three four five six", "target": [], **r, "row_index": i}
        obj["rows"].append(row)
    d, problems = parse_dialogue(obj, unknown_patterns="warning")  # RPP counts out-of-taxonomy gold
    assert d is not None, [str(p) for p in problems]
    return d


@pytest.fixture
def toy():
    """``toy(rows, participants=..., scenario=..., sample_id=...)`` builds a dialogue."""
    return make_dialogue


@pytest.fixture
def lexical_judge() -> EmbeddingJudge:
    """A fast ER/VP judge (token overlap) so that end-to-end tests load no model."""
    return EmbeddingJudge(LexicalSimilarity(), lo=0.0, hi=0.6)


class ConstantBert:
    """BERTScore stand-in: 1.0 for identical texts, 0.5 otherwise, 0 when one is empty."""

    model = "constant stand-in (tests)"

    def score(self, candidates, references):
        return [0.0 if not c or not r else (1.0 if c == r else 0.5) for c, r in zip(candidates, references)]


@pytest.fixture
def const_bert() -> ConstantBert:
    return ConstantBert()


class StubAgent:
    """A therapist agent of the protocol: speaks when someone's distress is above 0.5,
    addresses the worst-off member first, ranks strategies in taxonomy order."""

    name = "stub"

    def reset(self, *, seed: int | None = None) -> None:
        pass

    def act(self, observation, action_mask, state=None) -> int:
        return 0

    def rank(self, state, encoding):
        from rescue_env.agents.base import Ranking

        p = 0.9 if state.max_distress() > 0.5 else 0.1
        t = np.full(encoding.n_targets, 0.01)
        t[state.worst_off()] = 1.0
        t[encoding.group_target] = 0.5
        s = np.linspace(1.0, 0.1, encoding.n_strategies)
        return Ranking(p, t / t.sum(), s / s.sum())


@pytest.fixture
def stub_agent() -> StubAgent:
    return StubAgent()
