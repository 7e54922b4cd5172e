"""The runner: files, resume, skipped tasks, failures, the reference table."""

from __future__ import annotations

import json

import pytest

from rescue_env.tasks import (
    TASKS,
    Prediction,
    build_instances,
    format_table,
    make_baseline,
    read_details,
    run_tasks,
)
from rescue_env.tasks.predictors import MajorityPredictor


class Counting(MajorityPredictor):
    """The majority baseline, counting the instances it is asked."""

    name = "majority"

    def __init__(self, fail_every: int = 0, **kw):
        super().__init__(**kw)
        self.asked: list[str] = []
        self.fail_every = fail_every

    def predict(self, task, inst):
        self.asked.append(inst.id)
        if self.fail_every and len(self.asked) % self.fail_every == 0:
            return Prediction.failure("injected")
        return super().predict(task, inst)


def _run(data, pred, out, judge, **kw):
    kw.setdefault("bertscore", None)
    return run_tasks(data, TASKS, pred, "paper", out, progress=False, judge=judge, print_table=False, **kw)


def test_files_and_layout(seeds, tmp_path, lexical_judge, const_bert):
    res = _run(seeds, make_baseline("majority"), tmp_path, lexical_judge, bertscore=const_bert)
    on_disk = json.loads((tmp_path / "tasks.json").read_text())
    assert list(on_disk) == list(TASKS)
    itp = on_disk["itp"]
    for key in ("f1", "precision", "recall", "accuracy", "balanced_accuracy", "tp", "fp", "tn", "fn", "n", "failed", "by_scenario", "by_sample"):
        assert key in itp
    assert set(itp["by_scenario"]) == {"couple", "family"} and itp["by_scenario"]["couple"]["n"] > 0
    assert "per_label" in on_disk["rpp"] and "macro_f1" in on_disk["rpp"]["by_scenario"]["family"]
    assert on_disk["er"]["judge"]["kind"] == "lexical" and on_disk["er"]["bertscore_model"] == "constant stand-in (tests)"
    assert "not an LLM judgement" in on_disk["vp"]["judge"]["note"]
    lines = [json.loads(x) for x in (tmp_path / "details.jsonl").read_text().splitlines()]
    assert len(lines) == sum(res[t]["n"] for t in TASKS)
    for rec in lines:
        assert {"id", "task", "sample", "scenario", "gold", "prediction", "failed", "reason"} <= set(rec)
    assert {"correct"} <= set(next(r for r in lines if r["task"] == "itp"))
    assert {"pos", "ranked", "correct"} <= set(next(r for r in lines if r["task"] == "stp"))
    assert {"emotion_score", "intensity_match", "s_er", "bertscore_f1"} <= set(next(r for r in lines if r["task"] == "er"))
    assert json.loads((tmp_path / "run.json").read_text())["profile"] == "paper"


def test_resume_asks_nothing_again(seeds, tmp_path, lexical_judge):
    first = Counting()
    res1 = _run(seeds, first, tmp_path, lexical_judge)
    assert len(first.asked) == sum(res1[t]["n"] for t in TASKS)
    again = Counting()
    res2 = _run(seeds, again, tmp_path, lexical_judge)
    assert again.asked == []
    assert res2["itp"] == res1["itp"] and res2["vp"] == res1["vp"]
    n_lines = len((tmp_path / "details.jsonl").read_text().splitlines())
    # resume=False starts afresh
    fresh = Counting()
    _run(seeds, fresh, tmp_path, lexical_judge, resume=False)
    assert len(fresh.asked) == len(first.asked)
    assert len((tmp_path / "details.jsonl").read_text().splitlines()) == n_lines


def test_interrupted_run_resumes_where_it_stopped(seeds, tmp_path, lexical_judge):
    _run(seeds, Counting(), tmp_path, lexical_judge)
    path = tmp_path / "details.jsonl"
    lines = path.read_text().splitlines()
    kept = lines[: len(lines) // 2]
    path.write_text("\n".join(kept) + "\n" + lines[len(lines) // 2][:25])  # a torn last line
    rest = Counting()
    _run(seeds, rest, tmp_path, lexical_judge)
    assert len(rest.asked) == len(lines) - len(kept)
    assert len(read_details(path)) == len(lines)


def test_failures_are_counted_wrong_and_retried_on_request(seeds, tmp_path, lexical_judge):
    pred = Counting(fail_every=4)
    res = _run(seeds, pred, tmp_path, lexical_judge)
    for task in TASKS:
        assert res[task]["n"] == len(build_instances(seeds, task, "paper"))  # never dropped
    assert res["stp"]["failed"] > 0 and res["er"]["failed"] > 0
    recs = list(read_details(tmp_path / "details.jsonl").values())
    for r in recs:
        if r["failed"]:
            assert r["reason"] == "injected" and r["prediction"] is None
            if r["task"] == "itp":
                assert r["correct"] is False
            elif r["task"] in ("rpp", "stp", "ssp"):
                assert r["pos"] == 0 and r["ranked"] is None
            elif r["task"] == "er":
                assert (r["emotion_score"], r["intensity_match"], r["s_er"]) == (1.0, 1.0, 1.0)
            else:
                assert r["total"] == 0.0
    n_failed = sum(r["failed"] for r in recs)
    retry = Counting()
    res2 = _run(seeds, retry, tmp_path, lexical_judge, retry_failed=True)
    assert len(retry.asked) == n_failed
    assert all(res2[t]["failed"] == 0 for t in TASKS)


def test_released_rpp_failure_is_not_padded_to_gold(subset, tmp_path, lexical_judge):
    class Fails(MajorityPredictor):
        def predict_one(self, task, inst):
            return Prediction.failure("down")

    res = run_tasks(subset, ["rpp"], Fails(), "released", tmp_path, progress=False, print_table=False)
    assert res["rpp"]["accuracy"] == 0.0 and res["rpp"]["failed"] == res["rpp"]["n"] == 125


def test_settings_mismatch_and_bad_names(seeds, tmp_path, lexical_judge):
    _run(seeds, make_baseline("majority"), tmp_path, lexical_judge)
    with pytest.raises(ValueError, match="other settings"):
        _run(seeds, make_baseline("random"), tmp_path, lexical_judge)
    with pytest.raises(ValueError, match="unknown task"):
        run_tasks(seeds, ["itp", "nope"], make_baseline("majority"), "paper", tmp_path / "x", progress=False)
    with pytest.raises(ValueError, match="unknown profile"):
        run_tasks(seeds, ["itp"], make_baseline("majority"), "wrong", tmp_path / "y", progress=False)


def test_a_task_the_predictor_cannot_do_is_skipped(seeds, tmp_path):
    pred = make_baseline("majority")
    pred.generator = None  # no offline generator: ER and VP cannot be answered
    res = run_tasks(seeds, ["itp", "er", "vp"], pred, "paper", tmp_path, progress=False, print_table=False)
    assert "skipped" in res["er"] and "skipped" in res["vp"] and "f1" in res["itp"]
    table = format_table(res)
    assert "skipped" in table


def test_table_puts_the_paper_figures_beside(seeds, tmp_path, lexical_judge, capsys):
    run_tasks(seeds, TASKS, make_baseline("majority"), "paper", tmp_path, progress=False, judge=lexical_judge, bertscore=None)
    out = capsys.readouterr().out
    for figure in ("82.62", "94.6", "40.45", "64.34", "78.35", "31.88", "44.96", "4.05", "3.58"):
        assert figure in out
    assert "[lexical proxy]" in out and "paper mean" in out


def test_details_hold_line_separators_inside_strings(tmp_path):
    """A reply holding U+2028 / U+2029 / U+0085 stays in its line; a torn last line is skipped."""
    import json

    path = tmp_path / "details.jsonl"
    recs = [{"task": "er", "id": "a", "reply": "x\u2028y"}, {"task": "er", "id": "b", "reply": "p\u2029q\u0085r"}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs) + '{"task": "er", "id": "c"', encoding="utf-8")
    assert read_details(path) == {("er", "a"): recs[0], ("er", "b"): recs[1]}
