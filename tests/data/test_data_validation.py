"""Every bad input of the data layer, each on a broken copy in ``tmp_path``, checked through
the library (``DataValidationError.problems``, nothing returned) and through the console
script (non-zero exit, one ``FILE:LINE: field: what is wrong (expected)`` line per problem
on stderr, with the right line number).

JSON Lines cases run on a copy of the real subset (skipped without ``../shared``) and on a
JSON Lines copy of the bundled seeds (always). Directory cases run on a pretty-printed copy
of the seeds, where a row problem must point at the line where that row starts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rescue_env.data import DataValidationError, Problem, load_dialogues, validate

PROBLEM_LINE = re.compile(
    r"^(?P<file>[^:]+):(?P<line>\d+): (?P<field>[^\s:]+): (?P<what>.+) \((?P<expected>.+)\)$"
)

Expected = list[tuple[int, str]]  # (line, field) per problem, in report order


# --- helpers --------------------------------------------------------------------------------


def expect_library_errors(
    path: Path, expected: Expected, *, strict: bool = False, file: Path | None = None
) -> list[Problem]:
    """``load_dialogues(path)`` raises with exactly ``expected`` problems, all in ``file``
    (default: ``path`` itself); nothing is returned."""
    with pytest.raises(DataValidationError) as err:
        load_dialogues(path, strict=strict)
    problems = err.value.problems
    in_file = str(file or path)
    assert [(p.file, p.line, p.field) for p in problems] == [(in_file, line, fld) for line, fld in expected]
    assert all(p.severity == "error" for p in problems)
    assert str(err.value).splitlines() == [str(p) for p in problems]
    report = validate(path, strict=strict)
    assert not report.ok and report.dialogues == []
    return problems


def expect_cli_errors(run_cli: Callable, path: Path, problems: list[Problem], *, strict: bool = False) -> None:
    """``rescue data validate`` exits non-zero and prints one well-formed line per problem."""
    args = ["data", "validate", str(path)] + (["--strict"] if strict else [])
    res = run_cli(*args)
    assert res.rc != 0
    assert res.out == ""  # no summary: nothing was loaded
    lines = res.err.splitlines()
    problem_lines = [ln for ln in lines if PROBLEM_LINE.match(ln)]
    assert problem_lines == [str(p) for p in problems]
    for ln, p in zip(problem_lines, problems):
        m = PROBLEM_LINE.match(ln)
        assert (m["file"], int(m["line"]), m["field"]) == (p.file, p.line, p.field)
        assert m["what"] and m["expected"]
    others = [ln for ln in lines if not PROBLEM_LINE.match(ln)]
    assert len(others) == 1 and "nothing loaded" in others[0] and str(len(problems)) in others[0]


def expect_errors(
    run_cli, path: Path, expected: Expected, *, strict: bool = False, file: Path | None = None
) -> list[Problem]:
    problems = expect_library_errors(path, expected, strict=strict, file=file)
    expect_cli_errors(run_cli, path, problems, strict=strict)
    return problems


def first_row(rec: dict[str, Any], pred: Callable[[dict[str, Any]], bool]) -> int:
    return next(i for i, r in enumerate(rec["rows"]) if pred(r))


def write_lines(path: Path, lines: list[str], *, final_newline: bool = True) -> Path:
    path.write_text("\n".join(lines) + ("\n" if final_newline else ""), encoding="utf-8")
    return path


# --- JSON Lines bases -----------------------------------------------------------------------


@pytest.fixture(params=["real", "seeds"])
def base_lines(request, seed_records) -> list[str]:
    """A valid JSON Lines file as a list of lines: the real subset, or the seeds."""
    if request.param == "real":
        return list(request.getfixturevalue("real_lines"))
    return [json.dumps(rec, ensure_ascii=False) for rec in seed_records.values()]


def edit(lines: list[str], index: int, fn: Callable[[dict[str, Any]], str]) -> tuple[list[str], str]:
    """Apply ``fn`` to the record on ``lines[index]``; ``fn`` returns the field it broke."""
    rec = json.loads(lines[index])
    fld = fn(rec)
    out = list(lines)
    out[index] = json.dumps(rec, ensure_ascii=False)
    return out, fld


def test_base_copies_are_valid(tmp_path, base_lines):
    path = write_lines(tmp_path / "ok.jsonl", base_lines)
    assert len(load_dialogues(path, strict=True)) == len(base_lines)


# --- JSON Lines: every bad input ------------------------------------------------------------


@pytest.mark.parametrize(
    "bad_line",
    ["this is not json", "{'sample_id': 'single quotes'}", '{"sample_id": "x", "rows": []} trailing'],
    ids=["text", "single-quotes", "trailing-garbage"],
)
def test_line_not_json(tmp_path, run_cli, base_lines, bad_line):
    lines = list(base_lines)
    lines[3] = bad_line
    path = write_lines(tmp_path / "bad.jsonl", lines)
    (p,) = expect_errors(run_cli, path, [(4, "record")])
    assert "not valid JSON" in p.message


def test_record_not_an_object(tmp_path, run_cli, base_lines):
    lines = list(base_lines)
    lines[1] = "[1, 2, 3]"
    path = write_lines(tmp_path / "bad.jsonl", lines)
    expect_errors(run_cli, path, [(2, "record")])


def test_truncated_file(tmp_path, run_cli, base_lines):
    lines = list(base_lines)
    lines[-1] = lines[-1][: len(lines[-1]) // 2]  # the download stopped half-way
    path = write_lines(tmp_path / "bad.jsonl", lines, final_newline=False)
    (p,) = expect_errors(run_cli, path, [(len(lines), "record")])
    assert "truncated" in p.message


@pytest.mark.parametrize("how", ["deleted", "null", "empty"])
def test_row_without_primary_speaker(tmp_path, run_cli, base_lines, how):
    def drop(rec):
        if how == "deleted":
            del rec["rows"][2]["primary_speaker"]
        else:
            rec["rows"][2]["primary_speaker"] = None if how == "null" else "  "
        return "rows[2].primary_speaker"

    lines, fld = edit(base_lines, 4, drop)
    path = write_lines(tmp_path / "bad.jsonl", lines)
    (p,) = expect_errors(run_cli, path, [(5, fld)])
    assert p.message == ("empty" if how == "empty" else "missing")


@pytest.mark.parametrize("value", [{"0": {"primary_speaker": "Ana"}}, "rows", 17, None])
def test_rows_not_a_list(tmp_path, run_cli, base_lines, value):
    def set_rows(rec):
        rec["rows"] = value
        return "rows"

    lines, fld = edit(base_lines, 6, set_rows)
    path = write_lines(tmp_path / "bad.jsonl", lines)
    expect_errors(run_cli, path, [(7, fld)])


def _break_intensity(value):
    def fn(rec):
        i = first_row(rec, lambda r: len(r.get("internal_emotion") or []) > 0)
        j = len(rec["rows"][i]["internal_emotion"]) - 1
        rec["rows"][i]["internal_emotion"][j]["intensity"] = value
        return f"rows[{i}].internal_emotion[{j}].intensity"

    return fn


@pytest.mark.parametrize("value", [0, 11, 10.5, -3, 100])
def test_intensity_outside_1_to_10(tmp_path, run_cli, base_lines, value):
    lines, fld = edit(base_lines, 2, _break_intensity(value))
    path = write_lines(tmp_path / "bad.jsonl", lines)
    (p,) = expect_errors(run_cli, path, [(3, fld)])
    assert "outside 1-10" in p.message


@pytest.mark.parametrize("value", ["7", "high", True, False, [7], {"value": 7}, float("nan")])
def test_intensity_not_a_number(tmp_path, run_cli, base_lines, value):
    lines, fld = edit(base_lines, 2, _break_intensity(value))
    path = write_lines(tmp_path / "bad.jsonl", lines)
    (p,) = expect_errors(run_cli, path, [(3, fld)])
    assert "not a number" in p.message


def test_intensity_missing(tmp_path, run_cli, base_lines):
    lines, fld = edit(base_lines, 2, _break_intensity(None))
    path = write_lines(tmp_path / "bad.jsonl", lines)
    (p,) = expect_errors(run_cli, path, [(3, fld)])
    assert p.message == "missing"


@pytest.mark.parametrize("value", [1, 10, 1.0, 9.5])
def test_intensity_bounds_accepted(tmp_path, base_lines, value):
    lines, _ = edit(base_lines, 2, _break_intensity(value))
    path = write_lines(tmp_path / "ok.jsonl", lines)
    dialogues = load_dialogues(path, strict=True)
    assert value in [e.intensity for r in dialogues[2].rows for e in r.internal_emotion]


def _unknown_strategy(rec):
    i = first_row(rec, lambda r: any(s.get("strategy_type") for s in r.get("support_strategy") or []))
    rec["rows"][i]["support_strategy"][0]["strategy_type"] = "hug_it_out"
    return f"rows[{i}].support_strategy[0].strategy_type"


def _unknown_cycle_state(rec):
    i = first_row(rec, lambda r: bool(r.get("relation_cycle_state")))
    rec["rows"][i]["relation_cycle_state"] = "telepathy"
    return f"rows[{i}].relation_cycle_state"


def _unknown_relation_pattern(rec):
    i = first_row(rec, lambda r: r.get("primary_speaker") != "Therapist" and "relation_pattern" in r)
    rec["rows"][i]["relation_pattern"] = "telepathy"
    return f"rows[{i}].relation_pattern"


def _other_scenario_pattern(rec):
    """A label of the other taxonomy is unknown here."""
    i = first_row(rec, lambda r: bool(r.get("relation_cycle_state")))
    rec["rows"][i]["relation_cycle_state"] = (
        "escalation_conflict" if rec["scenario"] == "couple" else "attack_attack"
    )
    return f"rows[{i}].relation_cycle_state"


def test_unknown_strategy_warns_or_fails_under_strict(tmp_path, run_cli, base_lines):
    lines, fld = edit(base_lines, 1, _unknown_strategy)
    path = write_lines(tmp_path / "labels.jsonl", lines)

    # default: a counted warning, everything loads, exit 0
    report = validate(path)
    assert report.ok and report.errors == []
    assert [(w.file, w.line, w.field, w.severity) for w in report.warnings] == [(str(path), 2, fld, "warning")]
    assert len(load_dialogues(path)) == len(lines)
    res = run_cli("data", "validate", str(path))
    assert res.rc == 0
    assert "warnings: 1" in res.out
    assert str(report.warnings[0]) in res.out
    assert PROBLEM_LINE.match(str(report.warnings[0]))

    # --strict: an error, nothing loaded, non-zero exit
    (p,) = expect_errors(run_cli, path, [(2, fld)], strict=True)
    assert "unknown" in p.message


@pytest.mark.parametrize(
    "breaker",
    [_unknown_cycle_state, _unknown_relation_pattern, _other_scenario_pattern],
    ids=["cycle-state", "relation-pattern", "other-scenario-pattern"],
)
def test_unknown_pattern_label_is_an_error_without_strict(tmp_path, run_cli, base_lines, breaker):
    """The pattern seeds an episode's start: a label the taxonomy does not know would be
    dropped there (the episode starting from another pattern), so it stops the load."""
    lines, fld = edit(base_lines, 1, breaker)
    path = write_lines(tmp_path / "labels.jsonl", lines)
    (p,) = expect_errors(run_cli, path, [(2, fld)])
    assert "unknown" in p.message and "pattern" in p.message
    assert p.expected.startswith("one of [")


def test_the_rpp_task_reads_an_unknown_pattern_label_as_out_of_taxonomy_gold(tmp_path, base_lines):
    """eval-tasks loads with ``unknown_patterns="warning"``: the label is kept (RPP counts and
    excludes it, as the paper profile says) and reported as a warning at its line."""
    from rescue_env.data.loader import validate

    lines, fld = edit(base_lines, 1, _unknown_relation_pattern)
    path = write_lines(tmp_path / "labels.jsonl", lines)
    report = validate(path, unknown_patterns="warning")
    assert not report.errors and [(w.line, w.field) for w in report.warnings if "pattern" in w.message] == [(2, fld)]
    with pytest.raises(ValueError, match="unknown_patterns"):
        validate(path, unknown_patterns="ignore")


@pytest.mark.parametrize("content", ["", "\n", "\n  \n\n"], ids=["zero-bytes", "newline", "blank-lines"])
def test_empty_file(tmp_path, run_cli, content):
    path = tmp_path / "empty.jsonl"
    path.write_text(content, encoding="utf-8")
    (p,) = expect_errors(run_cli, path, [(1, "file")])
    assert "empty" in p.message


@pytest.mark.parametrize("name", ["missing.jsonl", "no_such_dir"])
def test_path_does_not_exist(tmp_path, run_cli, name):
    path = tmp_path / name
    (p,) = expect_errors(run_cli, path, [(0, "path")])
    assert "does not exist" in p.message


def test_several_problems_one_line_each(tmp_path, run_cli, base_lines):
    lines = list(base_lines)
    lines[1] = "{not json"

    def drop(rec):
        del rec["rows"][0]["primary_speaker"]
        return "rows[0].primary_speaker"

    lines, f1 = edit(lines, 5, drop)
    lines, f2 = edit(lines, 7, _break_intensity(42))
    path = write_lines(tmp_path / "bad.jsonl", lines)
    expect_errors(run_cli, path, [(2, "record"), (6, f1), (8, f2)])


def test_valid_subset_summary(run_cli, real_subset_path):
    res = run_cli("data", "validate", str(real_subset_path))
    assert res.rc == 0, res.err
    assert res.err == ""
    assert "10 dialogues" in res.out
    assert "337 rows" in res.out
    assert "couple: 9 dialogues" in res.out
    assert "family: 1 dialogues" in res.out
    assert "warnings: 0" in res.out
    strict = run_cli("data", "validate", str(real_subset_path), "--strict")
    assert strict.rc == 0 and strict.out == res.out


def test_summary_counts_labels(run_cli, real_subset_path, real_dialogues):
    res = run_cli("data", "validate", str(real_subset_path))
    n_pw = sum(1 for d in real_dialogues if d.scenario == "couple" for r in d.rows if r.relation_label == "pursue_withdraw")
    assert n_pw > 0
    assert f"couple:pursue_withdraw: {n_pw}" in res.out


# --- directory layout: a pretty-printed file per sample -------------------------------------


@pytest.fixture
def seed_dir(tmp_path, seed_records) -> Path:
    """A copy of the seeds, one ``indent=1`` JSON file per sample."""
    root = tmp_path / "seeds"
    for sid, rec in seed_records.items():
        f = root / f"{sid}.json"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(rec, indent=1, ensure_ascii=False), encoding="utf-8")
    return root


def rewrite(root: Path, sid: str, fn: Callable[[dict[str, Any]], Any]) -> tuple[Path, str, Any]:
    f = root / f"{sid}.json"
    rec = json.loads(f.read_text(encoding="utf-8"))
    result = fn(rec)
    text = json.dumps(rec, indent=1, ensure_ascii=False)
    f.write_text(text, encoding="utf-8")
    return f, text, result


def row_start_lines(text: str) -> list[int]:
    """1-based line of each row object: with ``indent=1`` a top-level ``rows`` element opens
    on a line that is exactly two spaces and ``{``."""
    return [n for n, line in enumerate(text.splitlines(), start=1) if line == "  {"]


def test_directory_copy_is_valid(seed_dir, seed_records):
    assert sorted(d.sample_id for d in load_dialogues(seed_dir, strict=True)) == sorted(seed_records)


@pytest.mark.parametrize("sid,row_i", [("family_therapy/f02_stepfamily_rules", 17), ("couple/c03_inlaw_boundaries", 0)])
def test_directory_row_without_primary_speaker(seed_dir, run_cli, sid, row_i):
    def drop(rec):
        del rec["rows"][row_i]["primary_speaker"]

    f, text, _ = rewrite(seed_dir, sid, drop)
    starts = row_start_lines(text)
    assert len(starts) == len(json.loads(text)["rows"])
    expected = [(starts[row_i], f"rows[{row_i}].primary_speaker")]
    expect_errors(run_cli, seed_dir, expected, file=f)
    expect_errors(run_cli, f, expected)  # the file on its own: same line


def test_directory_intensity_reports_row_start(seed_dir, run_cli):
    def break_late_row(rec):
        i = [k for k, r in enumerate(rec["rows"]) if r["internal_emotion"]][-1]
        rec["rows"][i]["internal_emotion"][0]["intensity"] = 12
        return i

    f, text, i = rewrite(seed_dir, "family_therapy/f03_family_business", break_late_row)
    line = row_start_lines(text)[i]
    assert line > 100  # far from the top, where a wrong line would show
    expect_errors(run_cli, seed_dir, [(line, f"rows[{i}].internal_emotion[0].intensity")], file=f)


def test_directory_unknown_strategy_warning_and_strict(seed_dir, run_cli):
    f, text, fld = rewrite(seed_dir, "couple/c05_blended_discipline", _unknown_strategy)
    i = int(re.match(r"rows\[(\d+)\]", fld)[1])
    line = row_start_lines(text)[i]
    report = validate(seed_dir)
    assert report.ok and [(w.file, w.line, w.field) for w in report.warnings] == [(str(f), line, fld)]
    res = run_cli("data", "validate", str(seed_dir))
    assert res.rc == 0 and "warnings: 1" in res.out and str(report.warnings[0]) in res.out
    expect_errors(run_cli, seed_dir, [(line, fld)], strict=True, file=f)


def test_directory_problems_in_two_files(seed_dir, run_cli):
    def drop(rec):
        del rec["rows"][5]["primary_speaker"]

    f1, text1, _ = rewrite(seed_dir, "couple/c02_affair_aftermath", drop)
    f2, text2, fld2 = rewrite(seed_dir, "family_therapy/f01_school_refusal", _break_intensity("nine"))
    k = int(re.match(r"rows\[(\d+)\]", fld2)[1])
    with pytest.raises(DataValidationError) as err:
        load_dialogues(seed_dir)
    assert [(p.file, p.line, p.field) for p in err.value.problems] == [
        (str(f1), row_start_lines(text1)[5], "rows[5].primary_speaker"),
        (str(f2), row_start_lines(text2)[k], fld2),
    ]
    assert validate(seed_dir).dialogues == []  # the seven good files are not returned either
    expect_cli_errors(run_cli, seed_dir, err.value.problems)


def test_directory_line_not_json(seed_dir, run_cli):
    f = seed_dir / "couple" / "c04_illness_silence.json"
    lines = f.read_text(encoding="utf-8").splitlines()
    n = len(lines) // 2
    lines[n - 1] = "  this is not json"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (p,) = expect_errors(run_cli, seed_dir, [(n, "record")], file=f)
    assert "not valid JSON" in p.message


def test_directory_truncated_file(seed_dir, run_cli):
    f = seed_dir / "family_therapy" / "f02_stepfamily_rules.json"
    lines = f.read_text(encoding="utf-8").splitlines()
    # the file stops in the middle of its last long text line
    k = max(i for i, ln in enumerate(lines) if '"dialogue_cleaned": "' in ln and len(ln) > 60)
    f.write_text("\n".join(lines[:k] + [lines[k][: len(lines[k]) // 2]]), encoding="utf-8")
    (p,) = expect_errors(run_cli, seed_dir, [(k + 1, "record")], file=f)
    assert "truncated" in p.message


def test_directory_empty_file(seed_dir, run_cli):
    f = seed_dir / "couple" / "c01_baby_budget.json"
    f.write_text("", encoding="utf-8")
    (p,) = expect_errors(run_cli, seed_dir, [(1, "file")], file=f)
    assert "empty" in p.message


def test_directory_without_json_files(tmp_path, run_cli):
    root = tmp_path / "nothing_here"
    root.mkdir()
    (root / "manifest.json").write_text("{}")
    (root / "notes.txt").write_text("no dialogues")
    (p,) = expect_errors(run_cli, root, [(0, "path")])
    assert ".json" in p.message


def test_directory_rows_not_a_list_is_an_error(seed_dir, run_cli):
    def set_rows(rec):
        rec["rows"] = "see attachment"

    f, _, _ = rewrite(seed_dir, "couple/c06_relocation_offer", set_rows)
    with pytest.raises(DataValidationError) as err:
        load_dialogues(seed_dir)
    assert [(p.file, p.field) for p in err.value.problems] == [(str(f), "rows")]
    expect_cli_errors(run_cli, seed_dir, err.value.problems)


def test_directory_rows_not_a_list_points_at_rows_key(seed_dir):
    def set_rows(rec):
        rec["rows"] = "see attachment"

    f, text, _ = rewrite(seed_dir, "couple/c06_relocation_offer", set_rows)
    (rows_line,) = [n for n, ln in enumerate(text.splitlines(), start=1) if ln.startswith(' "rows":')]
    assert rows_line > 1
    with pytest.raises(DataValidationError) as err:
        load_dialogues(seed_dir)
    assert [p.line for p in err.value.problems] == [rows_line]


# --- line separators inside strings ---------------------------------------------------------


def _separators_in_text(rec):
    i = first_row(rec, lambda r: bool(r.get("dialogue_cleaned")))
    rec["rows"][i]["dialogue_cleaned"] = "I said\u2028no.\u2029Then\u0085nothing."
    return f"rows[{i}].dialogue_cleaned"


def test_line_separators_inside_strings_are_accepted(tmp_path, run_cli, base_lines):
    """U+2028, U+2029 and U+0085 are valid raw inside a JSON string: the file loads, the
    text keeps them, and the line count is the file's."""
    lines, _ = edit(base_lines, 1, _separators_in_text)
    path = write_lines(tmp_path / "seps.jsonl", lines)
    assert "\u2028" in path.read_text(encoding="utf-8")
    dialogues = load_dialogues(path, strict=True)
    assert len(dialogues) == len(lines)
    # the published text (Row.raw) as written; the shown text is repaired by ftfy
    assert any("I said\u2028no.\u2029Then\u0085nothing." == r.raw["dialogue_cleaned"] for r in dialogues[1].rows)
    assert run_cli("data", "validate", str(path)).rc == 0


def test_line_numbers_after_a_line_separator(tmp_path, run_cli, base_lines):
    lines, _ = edit(base_lines, 0, _separators_in_text)
    lines[2] = "this is not json"
    path = write_lines(tmp_path / "seps.jsonl", lines)
    (p,) = expect_errors(run_cli, path, [(3, "record")])
    assert "not valid JSON" in p.message
