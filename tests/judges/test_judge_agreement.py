"""Human agreement: figures checked against values computed by hand (see the comments)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rescue_env.experiments.judge import agreement_main
from rescue_env.judges.agreement import AgreementInputError, compute_agreement, read_scores

# empathy:     judge  h1  h2          recognition: judge  h1  h2
#   i1           0     0   1            i1          2.5   3   3
#   i2           1     2   1            i2          1     1   3   <- humans differ by 2
#   i3           2     2   4  <- by 2   i3          4     4   4
#   i4           3     4   3
HUMAN = """item_id,dimension,rater,score
i1,empathy,h1,0
i2,empathy,h1,2
i3,empathy,h1,2
i4,empathy,h1,4
i1,empathy,h2,1
i2,empathy,h2,1
i3,empathy,h2,4
i4,empathy,h2,3
i1,recognition,h1,3
i2,recognition,h1,1
i3,recognition,h1,4
i1,recognition,h2,3
i2,recognition,h2,3
i3,recognition,h2,4
"""
JUDGE = """item_id,dimension,rater,score
i1,empathy,judge,0
i2,empathy,judge,1
i3,empathy,judge,2
i4,empathy,judge,3
i1,recognition,judge,2.5
i2,recognition,judge,1
i3,recognition,judge,4
"""

# Quadratic κ = 1 − mean_items (a−b)² / mean_{all pairs} (a_i − b_j)², worked by hand:
# empathy  judge vs h1: observed 2/4 = 0.5; expected 56/16 = 3.5      → κ = 6/7
#          judge vs h2: observed 5/4 = 1.25; expected 56/16 = 3.5     → κ = 9/14
#          h1 vs h2:    observed 7/4 = 1.75; expected 60/16 = 3.75    → κ = 8/15
# recognition (judge 2.5 rounds half up to 3)
#          judge vs h1: identical                                     → κ = 1
#          judge vs h2: observed 4/3; expected 20/9                   → κ = 0.4
#          h1 vs h2: same series as judge vs h2                       → κ = 0.4
EXPECTED = {
    "empathy": {"exact": 0.5, "mae": (0.5 + 0.75) / 2, "kappa_quadratic": (6 / 7 + 9 / 14) / 2,
                "kappa_between_humans": 8 / 15, "n_items": 4},
    "recognition": {"exact": (1 + 2 / 3) / 2, "mae": ((0.5 / 3) + (2.5 / 3)) / 2, "kappa_quadratic": 0.7,
                    "kappa_between_humans": 0.4, "n_items": 3},
}


def _independent_kappa(a: list[int], b: list[int]) -> float:
    """Weighted κ from the confusion-matrix definition (a second formula, no sklearn)."""
    k = 5
    n = len(a)
    obs = [[0.0] * k for _ in range(k)]
    for x, y in zip(a, b):
        obs[x][y] += 1 / n
    pa = [sum(row) for row in obs]
    pb = [sum(obs[i][j] for i in range(k)) for j in range(k)]
    w = [[(i - j) ** 2 / (k - 1) ** 2 for j in range(k)] for i in range(k)]
    num = sum(w[i][j] * obs[i][j] for i in range(k) for j in range(k))
    den = sum(w[i][j] * pa[i] * pb[j] for i in range(k) for j in range(k))
    return 1 - num / den


@pytest.fixture()
def csvs(tmp_path: Path) -> tuple[Path, Path]:
    h, j = tmp_path / "human.csv", tmp_path / "judge.csv"
    h.write_text(HUMAN)
    j.write_text(JUDGE)
    return h, j


def test_hand_worked_values_agree_with_the_matrix_formula() -> None:
    assert _independent_kappa([0, 1, 2, 3], [0, 2, 2, 4]) == pytest.approx(6 / 7)
    assert _independent_kappa([0, 1, 2, 3], [1, 1, 4, 3]) == pytest.approx(9 / 14)
    assert _independent_kappa([0, 2, 2, 4], [1, 1, 4, 3]) == pytest.approx(8 / 15)
    assert _independent_kappa([3, 1, 4], [3, 3, 4]) == pytest.approx(0.4)


def test_agreement_matches_hand_computed_figures(csvs: tuple[Path, Path]) -> None:
    report = compute_agreement(read_scores(csvs[0]), read_scores(csvs[1], integer=False))
    for dim, exp in EXPECTED.items():
        for key, value in exp.items():
            assert report[dim][key] == pytest.approx(value, abs=1e-4), (dim, key)
    assert report["empathy"]["meets_threshold"] is True      # 0.75 ≥ 0.6
    assert report["recognition"]["meets_threshold"] is True  # 0.70 ≥ 0.6
    assert report["soothing"]["kappa_quadratic"] is None and report["soothing"]["n_items"] == 0
    assert [(a["item_id"], a["dimension"], a["spread"]) for a in report["adjudication"]] == [
        ("i2", "recognition", 2),
        ("i3", "empathy", 2),
    ]
    assert report["adjudication"][1]["scores"] == {"h1": 2, "h2": 4}


def test_cli_writes_agreement_json_and_marks_the_kappa_line(csvs, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert agreement_main(["--human", str(csvs[0]), "--judge", str(csvs[1]), "--out", str(out)]) == 0
    data = json.loads((out / "agreement.json").read_text())
    assert set(data["empathy"]) >= {"exact", "mae", "kappa_quadratic", "kappa_between_humans", "n_items"}
    assert data["empathy"]["kappa_quadratic"] == pytest.approx(0.75, abs=1e-4)
    printed = capsys.readouterr().out
    assert "κ ≥ 0.6" in printed and "✓ yes" in printed and "i3 / empathy" in printed


@pytest.mark.parametrize(
    "text, message",
    [
        ("item_id,dimension,score\ni1,empathy,2\n", "missing column(s) rater"),
        ("item_id,dimension,rater,score\ni1,warmth,h1,2\n", "unknown dimension 'warmth'"),
        ("item_id,dimension,rater,score\ni1,empathy,h1,5\n", "outside 0-4"),
        ("item_id,dimension,rater,score\ni1,empathy,h1,-1\n", "outside 0-4"),
        ("item_id,dimension,rater,score\ni1,empathy,h1,2.5\n", "not a whole number"),
        ("item_id,dimension,rater,score\ni1,empathy,h1,abc\n", "not a number"),
        ("item_id,dimension,rater,score\ni1,empathy,h1,2\ni1,empathy,h1,3\n", "duplicate rating"),
        ("item_id,dimension,rater,score\n", "no ratings"),
    ],
)
def test_bad_csv_gives_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(AgreementInputError) as err:
        read_scores(p)
    assert message in str(err.value)
    assert str(p) in str(err.value)


def test_cli_reports_bad_input_with_exit_code_2(tmp_path: Path, capsys) -> None:
    p = tmp_path / "bad.csv"
    p.write_text("item_id,dimension,rater,score\ni1,empathy,h1,7\n")
    assert agreement_main(["--human", str(p), "--judge", str(p)]) == 2
    assert "outside 0-4" in capsys.readouterr().err
    assert agreement_main(["--human", str(tmp_path / "missing.csv"), "--judge", str(p)]) == 2


def test_read_judgements_keeps_line_separators_and_names_the_bad_line(tmp_path):
    import json

    from rescue_env.judges.agreement import AgreementInputError, read_judgements

    path = tmp_path / "judgements.jsonl"
    good = {"item_id": "i1", "reason": "calm\u2028then\u2029warm\u0085"}
    path.write_text(json.dumps(good, ensure_ascii=False) + "\n\n{bad\n", encoding="utf-8")
    with pytest.raises(AgreementInputError, match=r"judgements.jsonl:3: not valid JSON"):
        read_judgements(path)
    path.write_text(json.dumps(good, ensure_ascii=False) + "\n", encoding="utf-8")
    assert read_judgements(path) == [good]
