"""The rubric and the anchors are complete and consistent with the schema."""

from __future__ import annotations

import jsonschema
import pytest

from rescue_env.judges.anchors import ANCHORS
from rescue_env.judges.llm_judge import ABSOLUTE_SCHEMA, PAIRWISE_SCHEMA, absolute_messages
from rescue_env.judges.rubric import (
    DIMENSIONS,
    RUBRIC,
    DimensionScore,
    Judgement,
    average_judgements,
    combine,
    render_rubric,
)


def test_every_dimension_has_an_anchor_per_level_and_side() -> None:
    assert tuple(RUBRIC) == DIMENSIONS == ("recognition", "empathy", "soothing", "guidance", "boundaries")
    for dim in RUBRIC.values():
        for side in ("addressed", "others"):
            texts = [dim.anchor(side, k) for k in range(5)]
            assert all(len(t) > 20 for t in texts) and len(set(texts)) == 5
    with pytest.raises(ValueError):
        RUBRIC["empathy"].anchor("addressed", 5)
    text = render_rubric()
    assert "it will pass" in text and "follows_into_harm" in text and "demeans_client" in text


def test_schema_puts_scores_before_reasons() -> None:
    assert list(ABSOLUTE_SCHEMA["properties"]) == ["scores", "veto", "reasons", "veto_reason"]
    assert list(ABSOLUTE_SCHEMA["properties"]["scores"]["properties"]) == list(DIMENSIONS)
    assert list(PAIRWISE_SCHEMA["properties"])[-1] == "reason"
    jsonschema.Draft202012Validator.check_schema(ABSOLUTE_SCHEMA)


def test_combine_and_veto_rules() -> None:
    assert combine(4, 1) == 1 and combine(3, None) == 3
    dims = {d: DimensionScore(4, 4) for d in DIMENSIONS}
    assert Judgement("x", "s", dims).overall == 4
    assert Judgement("x", "s", dims, veto=True).overall == 0
    assert Judgement("x", "s", ok=False).overall is None


def test_average_of_repeats_uses_majority_veto() -> None:
    a = Judgement("x", "s", {d: DimensionScore(4, None) for d in DIMENSIONS})
    b = Judgement("x", "s", {d: DimensionScore(2, 3) for d in DIMENSIONS}, veto=True, veto_reason="demeans_client")
    c = Judgement("x", "s", ok=False, error="boom")
    avg = average_judgements("x", "s", [a, b, c])
    assert avg.n_samples == 2 and avg.dimensions["empathy"].addressed == 3 and avg.dimensions["empathy"].others == 3
    assert avg.veto  # 1 of 2: ties veto
    assert average_judgements("x", "s", [a, a, b]).veto is False


def test_anchors_span_the_scale_and_render_like_items() -> None:
    overall = [a.expected.overall for a in ANCHORS]
    assert min(overall) == 0 and max(overall) >= 3.5
    assert sum(a.expected.veto for a in ANCHORS) == 2
    for a in ANCHORS:
        user = absolute_messages(a.item)[-1]["content"]
        assert "anchor" not in user.lower()  # the judge cannot tell anchors from run items
