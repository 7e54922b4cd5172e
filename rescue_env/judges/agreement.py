"""Agreement between the judge and human raters, and among the raters.

Input: CSV files with the columns ``item_id,dimension,rater,score`` (extra columns are
ignored), one row per rating. Dimensions are the rubric's (``recognition``, ``empathy``,
``soothing``, ``guidance``, ``boundaries``), each rated 0-4 as the combined dimension score
(``min(addressed, others)``, see :mod:`~rescue_env.judges.rubric`). Human scores must be
integers; judge scores may be fractional (averaged repeats) and are rounded half up where
a category is needed (exact agreement, κ) but used as they are for the MAE. Several judge
rows for one (item, dimension) are averaged.

Per dimension (:func:`compute_agreement`):

- ``exact``, ``mae``, ``kappa_quadratic``: the judge against **each human rater** on the
  items both scored, then **averaged over raters** (each rater counts once). This keeps a
  rater's own scale intact instead of blending raters into a rounded mean.
- ``kappa_between_humans``: quadratic-weighted κ for every pair of raters over their
  shared items, averaged over pairs.
- ``n_items``: items with a judge score and at least one human score.
- ``meets_threshold``: ``kappa_quadratic >= 0.6`` (the usual "substantial" line).

κ is scikit-learn's ``cohen_kappa_score(weights="quadratic")`` over the fixed labels 0-4, so
the weights reflect score distance even when a label is unused; it is ``None`` where it is
undefined (both series constant). Items where two humans differ by more than 1 point are
listed for adjudication.
"""

from __future__ import annotations

import csv
import json
import math
import warnings
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from statistics import mean
from typing import Any, Iterable, Mapping, Sequence

from rescue_env.atomic import atomic_open, atomic_write_text
from rescue_env.jsonl import JsonlError, read_objects
from rescue_env.judges.rubric import DIMENSIONS, MAX_SCORE

REQUIRED_COLUMNS = ("item_id", "dimension", "rater", "score")
KAPPA_THRESHOLD = 0.6
LABELS = list(range(MAX_SCORE + 1))
METHOD = (
    "judge vs each human rater on shared items, averaged over raters (exact, MAE, quadratic kappa); "
    "kappa_between_humans = mean pairwise quadratic kappa over rater pairs; judge scores rounded half up "
    "for exact and kappa, raw for MAE"
)


class AgreementInputError(ValueError):
    """A scores CSV is malformed; ``problems`` lists every problem as ``FILE:LINE: message``."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


@dataclass(frozen=True, slots=True)
class Rating:
    item_id: str
    dimension: str
    rater: str
    score: float


def read_scores(path: str | Path, *, integer: bool = True) -> list[Rating]:
    """Read and check a scores CSV. ``integer`` requires whole-number scores (human raters).

    Raises:
        AgreementInputError: missing columns, empty fields, unknown dimensions, scores that
            are not numbers or lie outside 0-4, or duplicate (item, dimension, rater) rows;
            every problem of the file at once.
        FileNotFoundError: the file does not exist.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such scores file (expected a CSV with columns {','.join(REQUIRED_COLUMNS)})")
    with p.open(newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise AgreementInputError(
                [f"{p}:1: missing column(s) {', '.join(missing)} (found {', '.join(header) or 'no header'}; "
                 f"expected {','.join(REQUIRED_COLUMNS)})"]
            )
        reader.fieldnames = header
        problems: list[str] = []
        out: list[Rating] = []
        seen: dict[tuple[str, str, str], int] = {}
        for line, row in enumerate(reader, start=2):
            item = (row.get("item_id") or "").strip()
            dim = (row.get("dimension") or "").strip()
            rater = (row.get("rater") or "").strip()
            raw = (row.get("score") or "").strip()
            where = f"{p}:{line}"
            if not item or not rater:
                problems.append(f"{where}: empty item_id or rater")
                continue
            if dim not in DIMENSIONS:
                problems.append(f"{where}: unknown dimension {dim!r} (expected one of {', '.join(DIMENSIONS)})")
                continue
            try:
                score = float(raw)
            except ValueError:
                problems.append(f"{where}: score {raw!r} is not a number (expected 0-{MAX_SCORE})")
                continue
            if math.isnan(score) or not 0 <= score <= MAX_SCORE:
                problems.append(f"{where}: score {raw} outside 0-{MAX_SCORE}")
                continue
            if integer and not score.is_integer():
                problems.append(f"{where}: score {raw} is not a whole number (human scores are integers 0-{MAX_SCORE})")
                continue
            key = (item, dim, rater)
            if key in seen:
                problems.append(f"{where}: duplicate rating of {item!r}/{dim} by {rater!r} (first at line {seen[key]})")
                continue
            seen[key] = line
            out.append(Rating(item, dim, rater, score))
    if problems:
        raise AgreementInputError(problems)
    if not out:
        raise AgreementInputError([f"{p}: no ratings (the file has a header but no rows)"])
    return out


def judge_ratings_from_judgements(records: Iterable[Mapping[str, Any]], rater: str = "judge") -> list[Rating]:
    """Judge ratings from ``judgements.jsonl`` records (absolute mode, run items, ok only)."""
    out = []
    for r in records:
        if r.get("mode", "absolute") != "absolute" or r.get("kind", "item") != "item" or not r.get("ok", True):
            continue
        for dim, s in (r.get("scores") or {}).items():
            if dim in DIMENSIONS and s.get("score") is not None:
                out.append(Rating(str(r["item_id"]), dim, rater, float(s["score"])))
    return out


def read_judgements(path: str | Path) -> list[dict[str, Any]]:
    """Read a ``judgements.jsonl`` file (one JSON object per line)."""
    try:
        return [obj for _, obj in read_objects(path)]
    except JsonlError as e:
        raise AgreementInputError([str(e)]) from None


def write_scores_csv(ratings: Iterable[Rating], path: str | Path) -> Path:
    """Write ratings in the agreement CSV shape (``item_id,dimension,rater,score``)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(p, newline="") as fh:
        w = csv.writer(fh)
        w.writerow(REQUIRED_COLUMNS)
        for r in ratings:
            w.writerow([r.item_id, r.dimension, r.rater, f"{r.score:g}"])
    return p


def round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def quadratic_kappa(a: Sequence[int], b: Sequence[int]) -> float | None:
    """Quadratic-weighted Cohen's κ over labels 0-4 (``None`` when undefined)."""
    from sklearn.metrics import cohen_kappa_score

    if len(a) < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sklearn warns (and returns nan) when κ is undefined
        k = float(cohen_kappa_score(list(a), list(b), labels=LABELS, weights="quadratic"))
    return None if math.isnan(k) else k


def compute_agreement(
    human: Sequence[Rating], judge: Sequence[Rating] | None, *, threshold: float = KAPPA_THRESHOLD
) -> dict[str, Any]:
    """Agreement per dimension plus the adjudication list (see the module doc).

    With ``judge=None`` only the between-human figures and the adjudication list are filled.
    """
    hum: dict[str, dict[str, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))  # dim→rater→item→score
    for r in human:
        hum[r.dimension][r.rater][r.item_id] = r.score
    jud_acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in judge or []:
        jud_acc[r.dimension][r.item_id].append(r.score)
    jud = {d: {i: mean(v) for i, v in items.items()} for d, items in jud_acc.items()}

    report: dict[str, Any] = {}
    for dim in DIMENSIONS:
        raters = hum.get(dim, {})
        js = jud.get(dim, {})
        exact_r, mae_r, kappa_r = [], [], []
        for rater, scores in raters.items():
            shared = sorted(set(scores) & set(js))
            if not shared:
                continue
            h = [int(scores[i]) for i in shared]
            j_raw = [js[i] for i in shared]
            j = [round_half_up(x) for x in j_raw]
            exact_r.append(sum(1 for x, y in zip(h, j) if x == y) / len(shared))
            mae_r.append(sum(abs(x - y) for x, y in zip(h, j_raw)) / len(shared))
            k = quadratic_kappa(h, j)
            if k is not None:
                kappa_r.append(k)
        between = []
        for (r1, s1), (r2, s2) in combinations(sorted(raters.items()), 2):
            shared = sorted(set(s1) & set(s2))
            k = quadratic_kappa([int(s1[i]) for i in shared], [int(s2[i]) for i in shared])
            if k is not None:
                between.append(k)
        human_items = {i for s in raters.values() for i in s}
        kq = _r(mean(kappa_r)) if kappa_r else None
        report[dim] = {
            "exact": _r(mean(exact_r)) if exact_r else None,
            "mae": _r(mean(mae_r)) if mae_r else None,
            "kappa_quadratic": kq,
            "kappa_between_humans": _r(mean(between)) if between else None,
            "n_items": len(human_items & set(js)),
            "n_human_items": len(human_items),
            "n_raters": len(raters),
            "meets_threshold": None if kq is None else kq >= threshold,
        }
    report["kappa_threshold"] = threshold
    report["method"] = METHOD
    report["adjudication"] = adjudication_list(human)
    return report


def adjudication_list(human: Sequence[Rating], *, max_gap: int = 1) -> list[dict[str, Any]]:
    """(item, dimension) pairs where two human raters differ by more than ``max_gap``."""
    by: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for r in human:
        by[(r.item_id, r.dimension)][r.rater] = r.score
    out = []
    for (item, dim), scores in sorted(by.items(), key=lambda kv: (kv[0][0], DIMENSIONS.index(kv[0][1]))):
        if len(scores) >= 2:
            spread = max(scores.values()) - min(scores.values())
            if spread > max_gap:
                out.append({"item_id": item, "dimension": dim, "spread": int(spread),
                            "scores": {k: int(v) for k, v in sorted(scores.items())}})
    return out


def format_agreement(report: Mapping[str, Any]) -> str:
    """A plain-text table of :func:`compute_agreement`'s report, κ ≥ threshold marked."""
    thr = report.get("kappa_threshold", KAPPA_THRESHOLD)
    lines = [
        f"{'dimension':<12} {'n':>4} {'exact':>6} {'MAE':>6} {'κ judge':>8} {'κ humans':>9}  κ ≥ {thr}",
    ]
    for dim in DIMENSIONS:
        d = report[dim]
        mark = "—" if d["meets_threshold"] is None else ("✓ yes" if d["meets_threshold"] else "✗ below")
        lines.append(
            f"{dim:<12} {d['n_items']:>4} {_f(d['exact']):>6} {_f(d['mae']):>6} {_f(d['kappa_quadratic']):>8} "
            f"{_f(d['kappa_between_humans']):>9}  {mark}"
        )
    adj = report.get("adjudication", [])
    lines.append(f"{len(adj)} item-dimension(s) for adjudication (two humans differ by more than 1)")
    for a in adj:
        lines.append(f"  {a['item_id']} / {a['dimension']}: {a['scores']}")
    return "\n".join(lines)


def write_agreement(report: Mapping[str, Any], out_dir: str | Path) -> Path:
    """Write ``agreement.json`` into ``out_dir`` (created if needed)."""
    p = Path(out_dir)
    p.mkdir(parents=True, exist_ok=True)
    out = p / "agreement.json"
    atomic_write_text(out, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return out


def _r(x: float) -> float:
    return float(round(x, 4))


def _f(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"
