"""Metric functions on hand-computed cases."""

from __future__ import annotations

import pytest

from rescue_env.tasks import (
    binary_metrics,
    classification_metrics,
    intensity_match,
    normalise_topk,
    rank_metrics,
    rank_position,
    s_er,
)
from rescue_env.tasks.predictors import top_labels


def test_binary_metrics_hand_case_with_a_failure():
    # gold  T T F F T ; pred T fail F T F  ->  TP 1, FN 2 (one of them the failure), FP 1, TN 1
    m = binary_metrics([True, True, False, False, True], [True, None, False, True, False])
    assert (m["tp"], m["fn"], m["fp"], m["tn"], m["n"]) == (1, 2, 1, 1, 5)
    assert m["precision"] == pytest.approx(1 / 2)
    assert m["recall"] == pytest.approx(1 / 3)
    assert m["f1"] == pytest.approx(0.4)
    assert m["precision_no"] == pytest.approx(1 / 3) and m["recall_no"] == pytest.approx(1 / 2)
    assert m["f1_no"] == pytest.approx(0.4)
    assert m["accuracy"] == pytest.approx(2 / 5)
    assert m["balanced_accuracy"] == pytest.approx((1 / 3 + 1 / 2) / 2)


def test_binary_metrics_failures_are_wrong_on_both_classes():
    m = binary_metrics([True, False], [None, None])
    assert (m["tp"], m["fn"], m["fp"], m["tn"]) == (0, 1, 1, 0)
    assert m["accuracy"] == 0.0


def test_binary_metrics_zero_divisions():
    m = binary_metrics([False, False], [False, False])  # never "yes": P and R of yes divide by 0
    assert m["precision"] == 0.0 and m["recall"] == 0.0 and m["f1"] == 0.0
    assert m["accuracy"] == 1.0 and m["balanced_accuracy"] == 0.5
    empty = binary_metrics([], [])
    assert empty["n"] == 0 and empty["accuracy"] == 0.0 and empty["f1"] == 0.0
    with pytest.raises(ValueError):
        binary_metrics([True], [])


def test_normalise_topk_paper_keeps_slots():
    valid = ["a", "b", "c", "d"]
    # invalid and duplicate labels keep their slot and never match; the 4th item is cut
    assert normalise_topk(["x", "a", "a", "b"], valid, profile="paper") == [None, "a", None]
    assert normalise_topk([" b ", "c"], valid, profile="paper") == ["b", "c"]  # cleaned, not padded
    assert normalise_topk([], valid, profile="paper") == []
    assert normalise_topk(None, valid, profile="paper") == []
    assert normalise_topk("a", valid, profile="paper") == []  # not a list: nothing


def test_normalise_topk_released_drops_and_pads():
    valid = ["a", "b", "c", "d"]
    # invalid/duplicates dropped so later labels move up; RPP pads with the taxonomy in order
    assert normalise_topk(["x", "a", "a", "b"], valid, profile="released", pad=valid) == ["a", "b", "c"]
    assert normalise_topk([], valid, profile="released", pad=valid) == ["a", "b", "c"]  # the peer's quirk
    # STP/SSP pad with "", which never matches
    assert normalise_topk(["x", "b"], valid, profile="released") == ["b", "", ""]
    assert normalise_topk(None, valid, profile="released") == ["", "", ""]


def test_rank_position_absent_duplicates_and_invalid():
    assert rank_position(["a", "b", "c"], "b") == 2
    assert rank_position(["a", "b", "c"], "z") == 0  # absent gold
    assert rank_position([None, "a", None], "a") == 2  # an invalid first slot does not promote
    assert rank_position(["a", "a"], "a") == 1  # first occurrence
    assert rank_position(None, "a") == 0  # failed
    assert rank_position(["", "", ""], "") == 0  # padding never matches, nor empty gold
    assert rank_position([], "a") == 0


def test_rank_metrics_hand_case():
    m = rank_metrics([1, 2, 0, 3])
    assert m["recall_at_1"] == pytest.approx(0.25)
    assert m["recall_at_2"] == pytest.approx(0.5)
    assert m["recall_at_3"] == pytest.approx(0.75)
    assert m["mrr"] == pytest.approx((1 + 0.5 + 0 + 1 / 3) / 4)
    assert rank_metrics([]) == {"recall_at_1": 0.0, "recall_at_2": 0.0, "recall_at_3": 0.0, "mrr": 0.0}
    # a gold label outside the top 3 counts as absent (MRR truncated at 3)
    assert rank_metrics([4])["mrr"] == 0.0


def test_classification_metrics_macro_over_present_or_all_labels():
    golds = ["a", "a", "b", "c"]
    preds = ["a", "b", None, "c"]  # None: a failed prediction, wrong and predicting no label
    m = classification_metrics(golds, preds)
    assert m["accuracy"] == pytest.approx(0.5)
    assert m["per_label"]["a"] == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3), "support": 2, "predicted": 1}
    assert m["per_label"]["b"]["f1"] == 0.0 and m["per_label"]["b"]["predicted"] == 1
    assert m["macro_f1"] == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert m["macro_precision"] == pytest.approx((1 + 0 + 1) / 3)
    # released: every taxonomy label counts, zero-support "d" adds a zero
    r = classification_metrics(golds, preds, labels=["a", "b", "c", "d"])
    assert r["macro_f1"] == pytest.approx((2 / 3 + 0 + 1 + 0) / 4)
    assert classification_metrics([], [])["macro_f1"] == 0.0


def test_ties_break_in_taxonomy_order():
    assert top_labels({"a": 0.5, "b": 0.5, "c": 0.0}, ["b", "a", "c"]) == ["b", "a", "c"]
    assert top_labels({}, ["x", "y", "z", "w"]) == ["x", "y", "z"]


def test_er_formula_scores():
    assert intensity_match(7, 7) == 5
    assert intensity_match(6, 4) == 3
    assert intensity_match(3, 9) == 1  # 5 - 6 floors at 1
    assert intensity_match(None, 5) == 1  # a failed prediction
    assert s_er(4, 2) == 3.0
