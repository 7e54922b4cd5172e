"""Metric functions of the six tasks (``docs/PROTOCOL.md``), pure and small.

Conventions every function keeps:

- a *failed* prediction (``None``) is wrong: it stays in every denominator and never
  matches the gold label;
- any division by zero gives ``0.0``;
- rankings are top-3 lists; ``rank_position`` is 1-based, ``0`` when gold is absent, so a
  gold label outside the top 3 scores 0 in R@k and MRR (MRR is truncated at 3).

Top-3 normalisation differs by profile (:func:`normalise_topk`): ``released`` drops invalid
and duplicate labels so that later ones move up, and pads (RPP with taxonomy labels in
order, which can hand gold to an empty answer; STP/SSP with ``""``); ``paper`` keeps every
item in the slot it was given, an invalid or repeated label occupying its slot without
ever matching, and does not pad.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Sequence


def safe_div(num: float, den: float) -> float:
    """``num / den``, or ``0.0`` when ``den`` is zero."""
    return float(num) / float(den) if den else 0.0


def f1(p: float, r: float) -> float:
    """Harmonic mean of precision and recall; ``0.0`` when both are zero."""
    return safe_div(2 * p * r, p + r)


# ---------------------------------------------------------------------------------------------
# ITP


def binary_metrics(golds: Sequence[bool], preds: Sequence[bool | None]) -> dict[str, Any]:
    """Confusion counts and figures of the "speak" (yes) class and the "listen" (no) class.

    ``preds`` entries are ``True`` (speak), ``False`` (listen) or ``None`` (failed). A failed
    prediction is counted as the wrong class: a false negative when gold is yes, a false
    positive when gold is no. Returns ``precision``, ``recall``, ``f1`` (yes class),
    ``precision_no``, ``recall_no``, ``f1_no``, ``accuracy``, ``balanced_accuracy`` and
    ``tp``, ``fp``, ``tn``, ``fn``, ``n``.
    """
    if len(golds) != len(preds):
        raise ValueError(f"{len(golds)} gold labels but {len(preds)} predictions")
    tp = fp = tn = fn = 0
    for g, p in zip(golds, preds):
        said_yes = (not g) if p is None else bool(p)
        if g and said_yes:
            tp += 1
        elif g:
            fn += 1
        elif said_yes:
            fp += 1
        else:
            tn += 1
    p_yes, r_yes = safe_div(tp, tp + fp), safe_div(tp, tp + fn)
    p_no, r_no = safe_div(tn, tn + fn), safe_div(tn, tn + fp)
    n = len(golds)
    return {
        "precision": p_yes,
        "recall": r_yes,
        "f1": f1(p_yes, r_yes),
        "precision_no": p_no,
        "recall_no": r_no,
        "f1_no": f1(p_no, r_no),
        "accuracy": safe_div(tp + tn, n),
        "balanced_accuracy": (r_yes + r_no) / 2,
        "tp": tp,
        "fp": fp,
        "tn": tn,
        "fn": fn,
        "n": n,
    }


# ---------------------------------------------------------------------------------------------
# rankings (RPP, STP, SSP)


def normalise_topk(
    raw: Iterable[Any] | None,
    valid: Sequence[str],
    *,
    profile: str = "paper",
    pad: Sequence[str] | None = None,
    k: int = 3,
) -> list[str | None]:
    """A predicted ranking as the list that is scored.

    ``paper``: the first ``k`` items, cleaned; an item that is not in ``valid`` or repeats an
    earlier one becomes ``None`` in its slot (it keeps its rank and never matches). No padding.
    ``released``: cleaned items in ``valid``, duplicates dropped (first kept), then padded with
    ``pad`` items not yet present (RPP: the taxonomy in order), then with ``""`` (STP/SSP pass
    no ``pad``), cut to ``k``.
    ``raw`` of ``None`` or a non-list counts as empty.
    """
    items = [str(x or "").strip() for x in raw] if isinstance(raw, (list, tuple)) else []
    valid_set = set(valid)
    if profile == "paper":
        out: list[str | None] = []
        seen: set[str] = set()
        for x in items[:k]:
            if x in valid_set and x not in seen:
                out.append(x)
                seen.add(x)
            else:
                out.append(None)
        return out
    kept: list[str | None] = []
    for x in items:
        if x in valid_set and x not in kept:
            kept.append(x)
    for x in pad or ():
        if len(kept) >= k:
            break
        if x not in kept:
            kept.append(x)
    while len(kept) < k:  # STP/SSP pad with "", which never matches gold
        kept.append("")
    return kept[:k]


def rank_position(ranked: Sequence[str | None] | None, gold: str) -> int:
    """1-based position of the first occurrence of ``gold`` in ``ranked``; ``0`` when absent,
    when ``ranked`` is ``None`` (failed) or when ``gold`` is empty."""
    if not ranked or not gold:
        return 0
    for i, x in enumerate(ranked, start=1):
        if x is not None and x == gold:
            return i
    return 0


def rank_metrics(positions: Sequence[int], ks: Sequence[int] = (1, 2, 3), cutoff: int = 3) -> dict[str, float]:
    """``recall_at_{k}`` and ``mrr`` (micro averages) from 1-based positions (0 = absent);
    a position beyond ``cutoff`` counts as absent (MRR truncated at the top 3)."""
    n = len(positions)
    pos = [p if 1 <= p <= cutoff else 0 for p in positions]
    out = {f"recall_at_{k}": safe_div(sum(1 for p in pos if 1 <= p <= k), n) for k in ks}
    out["mrr"] = safe_div(sum(1.0 / p for p in pos if p >= 1), n)
    return out


def classification_metrics(
    golds: Sequence[str], preds: Sequence[str | None], labels: Sequence[str] | None = None
) -> dict[str, Any]:
    """Top-1 accuracy, per-label and macro precision/recall/F1.

    ``labels=None`` (paper): macro averages over the labels that occur in gold or in the
    predictions. A label list (released): over exactly those labels, zero-support ones
    contributing 0. ``None`` predictions (failed) are wrong and predict no label.
    Returns ``accuracy``, ``macro_precision``, ``macro_recall``, ``macro_f1``,
    ``per_label`` (``{label: {precision, recall, f1, support, predicted}}``) and ``n``.
    """
    if len(golds) != len(preds):
        raise ValueError(f"{len(golds)} gold labels but {len(preds)} predictions")
    support = Counter(golds)
    predicted = Counter(p for p in preds if p is not None)
    correct = Counter(g for g, p in zip(golds, preds) if p is not None and p == g)
    if labels is None:
        label_set = sorted(set(support) | set(predicted))
    else:
        label_set = list(dict.fromkeys(labels))
    per: dict[str, dict[str, float]] = {}
    for lab in label_set:
        p = safe_div(correct[lab], predicted[lab])
        r = safe_div(correct[lab], support[lab])
        per[lab] = {"precision": p, "recall": r, "f1": f1(p, r), "support": support[lab], "predicted": predicted[lab]}
    m = len(label_set)
    return {
        "accuracy": safe_div(sum(correct.values()), len(golds)),
        "macro_precision": safe_div(sum(v["precision"] for v in per.values()), m),
        "macro_recall": safe_div(sum(v["recall"] for v in per.values()), m),
        "macro_f1": safe_div(sum(v["f1"] for v in per.values()), m),
        "per_label": per,
        "n": len(golds),
    }


# ---------------------------------------------------------------------------------------------
# ER / VP


def intensity_match(pred: int | None, gold: int) -> int:
    """ER's formula score ``max(1, 5 - |pred - gold|)`` (1..5); ``1`` for a failed prediction."""
    if pred is None:
        return 1
    return max(1, 5 - abs(int(pred) - int(gold)))


def s_er(emotion_score: float, intensity_score: float) -> float:
    """The paper's ER score S_ER = (S_emo + S_int) / 2 on the 1-5 scale."""
    return (float(emotion_score) + float(intensity_score)) / 2


def mean(values: Iterable[float | None]) -> float:
    """Mean of the non-``None`` values; ``0.0`` for none."""
    vals = [float(v) for v in values if v is not None]
    return safe_div(sum(vals), len(vals))
