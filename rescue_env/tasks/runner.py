"""Run tasks end to end: build instances, predict, score, aggregate, write, print.

:func:`run_tasks` is the one entry point (``rescue eval-tasks`` is a thin Hydra app over it).
Files written in ``out_dir``:

- ``details.jsonl``: one line per finished instance (``id``, ``task``, ``sample``,
  ``scenario``, ``row_index``, ``gold``, ``prediction``, the instance's scores, ``failed``,
  ``reason``), appended as batches finish. A rerun with ``resume=True`` reads it back and
  asks nothing that is already there; figures are always recomputed from the whole file.
- ``tasks.json``: per task (lower-case keys) the overall (micro) figures with ``n`` and
  ``failed``, ``by_scenario`` and ``by_sample`` breakdowns, the profile, predictor, judge and
  BERTScore model used; a task the predictor cannot do carries ``"skipped": reason``.
- ``run.json``: the settings of the run (a resumed run must match them).

The printed table puts the paper's reference figures (zero-shot LLMs, mean of 10 / best;
DESIGN.md §6) beside this run's.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable, Sequence

from rescue_env.atomic import atomic_write_text
from rescue_env.data.schema import Dialogue
from rescue_env.jsonl import numbered_lines, read_text
from rescue_env.tasks.instances import (
    GENERATIVE_TASKS,
    Instance,
    InstanceSet,
    build_instances,
    check_profile,
    check_task,
)
from rescue_env.tasks.metrics import (
    binary_metrics,
    classification_metrics,
    intensity_match,
    mean,
    normalise_topk,
    rank_metrics,
    rank_position,
    s_er,
)
from rescue_env.tasks.predictors import Prediction, Predictor
from rescue_env.tasks.scorers import (
    BertScore,
    Grade,
    Judge,
    make_bertscore,
    make_offline_judge,
    vp_text,
)
from rescue_env.taxonomy.labels import patterns

log = logging.getLogger(__name__)

DETAILS_FILE = "details.jsonl"
RESULTS_FILE = "tasks.json"
RUN_FILE = "run.json"

#: The paper's zero-shot LLM figures (mean of 10 models / best), DESIGN.md §6. Percentages
#: for ITP/RPP/STP/SSP; ER S_ER and VP judge on the paper's scales; ER BERTScore one figure.
REFERENCE: dict[tuple[str, str], tuple[float | None, float | None]] = {
    ("itp", "f1"): (82.62, 94.60),
    ("rpp", "accuracy"): (40.45, 45.60),
    ("stp", "recall_at_1"): (64.34, 71.04),
    ("stp", "mrr"): (78.35, 82.23),
    ("ssp", "recall_at_1"): (31.88, 37.26),
    ("ssp", "mrr"): (44.96, 52.00),
    ("er", "s_er"): (4.05, 4.22),
    ("er", "bertscore_f1"): (0.8223, None),
    ("vp", "total"): (3.58, 4.08),
}

#: Rows of the printed table: (task, metric key, label, scale).
TABLE_ROWS: list[tuple[str, str, str, float]] = [
    ("itp", "f1", "F1 (speak) %", 100),
    ("itp", "precision", "P (speak) %", 100),
    ("itp", "recall", "R (speak) %", 100),
    ("itp", "accuracy", "accuracy %", 100),
    ("rpp", "accuracy", "accuracy (R@1) %", 100),
    ("rpp", "recall_at_3", "R@3 %", 100),
    ("rpp", "mrr", "MRR %", 100),
    ("rpp", "macro_f1", "macro F1 %", 100),
    ("stp", "recall_at_1", "R@1 %", 100),
    ("stp", "mrr", "MRR %", 100),
    ("ssp", "recall_at_1", "R@1 %", 100),
    ("ssp", "mrr", "MRR %", 100),
    ("er", "s_er", "S_ER (1-5)", 1),
    ("er", "emotion_score", "emotion (1-5)", 1),
    ("er", "intensity_match", "intensity match (1-5)", 1),
    ("er", "bertscore_f1", "BERTScore F1", 1),
    ("vp", "total", "total (0-6)", 1),
    ("vp", "source_target_score", "source/target (0-2)", 1),
    ("vp", "viewpoint_score", "viewpoint (0-4)", 1),
    ("vp", "bertscore_f1", "BERTScore F1", 1),
]


# ---------------------------------------------------------------------------------------------
# scoring one instance


def _ranked_valid(inst: Instance) -> list[str]:
    return [c for c in dict.fromkeys(inst.candidates) if c != "__empty__"]


def score_ranking(inst: Instance, pred: Prediction, profile: str) -> dict[str, Any]:
    """Scores of an RPP/STP/SSP prediction: the normalised ranking, gold's position, top-1."""
    if pred.failed:
        return {"ranked": None, "pos": 0, "top1": None, "correct": False}
    pad = list(inst.candidates) if (inst.task == "rpp" and profile == "released") else None
    ranked = normalise_topk(pred.value, _ranked_valid(inst), profile=profile, pad=pad)
    pos = rank_position(ranked, inst.gold)
    top1 = ranked[0] if ranked and ranked[0] else None
    return {"ranked": ranked, "pos": pos, "top1": top1, "correct": pos == 1}


def score_itp(inst: Instance, pred: Prediction) -> dict[str, Any]:
    """ITP: the prediction is right when it equals gold; a failure is wrong."""
    return {"correct": (not pred.failed) and pred.value == inst.gold}


def _bottom_er() -> dict[str, float]:
    return {"emotion_score": 1.0, "intensity_match": 1.0, "s_er": 1.0}


def score_generative(inst: Instance, pred: Prediction, grade: Grade | None, bert: float | None) -> tuple[dict[str, Any], bool, str]:
    """ER/VP scores of one instance, with ``failed`` and the reason. A failed prediction or
    grade gets the bottom of each scale (ER 1, VP 0, BERTScore 0 for a failed prediction)."""
    reasons = [pred.reason] if pred.failed else []
    if grade is not None and grade.failed:
        reasons.append(grade.reason)
    failed = bool(reasons)
    if inst.task == "er":
        if pred.failed:
            scores: dict[str, Any] = _bottom_er()
        else:
            emo = 1.0 if (grade is None or grade.failed) else float(grade.scores["emotion_score"])
            im = float(intensity_match(pred.value.get("intensity"), inst.gold["intensity"]))
            scores = {"emotion_score": emo, "intensity_match": im, "s_er": s_er(emo, im)}
    else:
        if pred.failed or grade is None or grade.failed:
            scores = {"source_target_score": 0.0, "viewpoint_score": 0.0, "total": 0.0}
        else:
            st, vs = float(grade.scores["source_target_score"]), float(grade.scores["viewpoint_score"])
            scores = {"source_target_score": st, "viewpoint_score": vs, "total": st + vs}
            if "judge_total" in grade.scores:
                scores["judge_total"] = float(grade.scores["judge_total"])
    if bert is not None:
        scores["bertscore_f1"] = 0.0 if pred.failed else float(bert)
    if grade is not None and grade.extra:
        scores["judge_info"] = grade.extra
    return scores, failed, "; ".join(r for r in reasons if r)


# ---------------------------------------------------------------------------------------------
# aggregation


def _figures(task: str, records: list[dict], profile: str, labels: Sequence[str] | None, per_label: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if task == "itp":
        preds = [None if r["failed"] else r["prediction"] == "yes" for r in records]
        out.update(binary_metrics([r["gold"] == "yes" for r in records], preds))
    elif task in ("rpp", "stp", "ssp"):
        out.update(rank_metrics([int(r.get("pos", 0)) for r in records]))
        if task == "rpp":
            cm = classification_metrics([r["gold"] for r in records], [r.get("top1") for r in records], labels=labels)
            out["accuracy"] = cm["accuracy"]
            for k in ("macro_precision", "macro_recall", "macro_f1"):
                out[k] = cm[k]
            if per_label:
                out["per_label"] = cm["per_label"]
    else:
        keys = ["emotion_score", "intensity_match", "s_er"] if task == "er" else ["source_target_score", "viewpoint_score", "total", "judge_total"]
        keys.append("bertscore_f1")
        for k in keys:
            vals = [r[k] for r in records if k in r]
            if vals:
                out[k] = mean(vals)
    out["n"] = len(records)
    out["failed"] = sum(1 for r in records if r["failed"])
    return out


def _rpp_labels(profile: str, scenarios: Iterable[str]) -> list[str] | None:
    # Released macro averages run over every taxonomy label (zero-support ones too).
    if profile != "released":
        return None
    labels: list[str] = []
    for s in scenarios:
        labels.extend(x for x in patterns(s) if x not in labels)
    return labels


def aggregate(task: str, records: list[dict], profile: str) -> dict[str, Any]:
    """Overall (micro), ``by_scenario`` and ``by_sample`` figures of one task from its detail
    records (each breakdown with its ``n`` and ``failed``)."""
    scenarios = list(dict.fromkeys(r["scenario"] for r in records))
    out = _figures(task, records, profile, _rpp_labels(profile, scenarios), per_label=True)
    by_scn: dict[str, list[dict]] = defaultdict(list)
    by_sample: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        by_scn[r["scenario"]].append(r)
        by_sample[r["sample"]].append(r)
    out["by_scenario"] = {s: _figures(task, rs, profile, _rpp_labels(profile, [s]), per_label=True) for s, rs in by_scn.items()}
    out["by_sample"] = {
        s: {"scenario": rs[0]["scenario"], **_figures(task, rs, profile, _rpp_labels(profile, [rs[0]["scenario"]]), per_label=False)}
        for s, rs in by_sample.items()
    }
    return out


# ---------------------------------------------------------------------------------------------
# the run


def _batches(instances: list[Instance], size: int) -> list[list[Instance]]:
    """Consecutive instances of one sample, at most ``size`` per batch."""
    out: list[list[Instance]] = []
    for inst in instances:
        if out and out[-1][0].sample_id == inst.sample_id and len(out[-1]) < size:
            out[-1].append(inst)
        else:
            out.append([inst])
    return out


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return x.item()
    return x


def read_details(path: Path) -> dict[tuple[str, str], dict]:
    """Finished instances of a details file, keyed by ``(task, id)`` (the last line wins;
    a truncated last line, from an interrupted run, is ignored)."""
    done: dict[tuple[str, str], dict] = {}
    if not path.exists():
        return done
    for n, line in numbered_lines(read_text(path)):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            log.warning("%s:%d: skipping an unreadable line (interrupted write?)", path, n)
            continue
        done[(rec["task"], rec["id"])] = rec
    return done


class _Scoring:
    """Judge and BERTScore, created on first use (loading models only when ER/VP run)."""

    def __init__(self, judge: Judge | None, bertscore: BertScore | str | None):
        self._judge = judge
        self._bert = bertscore

    @property
    def judge(self) -> Judge:
        if self._judge is None:
            self._judge = make_offline_judge()
        return self._judge

    @property
    def bert(self) -> BertScore | None:
        if self._bert == "auto":
            self._bert = make_bertscore()
        return self._bert if not isinstance(self._bert, str) else None

    def describe(self) -> dict[str, Any]:
        j = self.judge
        return {"judge": j.describe() if hasattr(j, "describe") else {"name": getattr(j, "name", "?")}, "bertscore_model": self.bert.model if self.bert else "not computed"}


async def _score_batch(task: str, profile: str, batch: list[Instance], preds: list[Prediction], scoring: _Scoring) -> list[dict]:
    grades: list[Grade | None] = [None] * len(batch)
    berts: list[float | None] = [None] * len(batch)
    if task in GENERATIVE_TASKS:
        ok = [j for j, p in enumerate(preds) if not p.failed]
        if ok:
            try:
                got = await scoring.judge.agrade(task, [batch[j] for j in ok], [preds[j].value for j in ok])
            except Exception as exc:  # a judge bug fails these grades, never the run
                got = [Grade(failed=True, reason=f"judge raised {type(exc).__name__}: {exc}") for _ in ok]
            for j, g in zip(ok, got):
                grades[j] = g
        bert = scoring.bert
        if bert is not None:
            if task == "er":
                cands = ["" if p.failed else str(p.value.get("emotion", "")) for p in preds]
                refs = [inst.gold["emotion"] for inst in batch]
            else:
                cands = ["" if p.failed else vp_text(p.value) for p in preds]
                refs = [vp_text(inst.gold) for inst in batch]
            berts = list(bert.score(cands, refs))
    records = []
    for j, (inst, pred) in enumerate(zip(batch, preds)):
        rec: dict[str, Any] = {
            "id": inst.id,
            "task": task,
            "sample": inst.sample_id,
            "scenario": inst.scenario,
            "row_index": inst.row_index,
            "gold": inst.gold,
            "prediction": pred.value,
        }
        failed, reason = pred.failed, pred.reason
        if task == "itp":
            rec.update(score_itp(inst, pred))
        elif task in ("rpp", "stp", "ssp"):
            rec.update(score_ranking(inst, pred, profile))
        else:
            scores, failed, reason = score_generative(inst, pred, grades[j], berts[j])
            rec.update(scores)
        rec["failed"] = failed
        rec["reason"] = reason
        if pred.extra:
            rec["info"] = pred.extra
        records.append(_jsonable(rec))
    return records


async def _predict(predictor: Predictor, task: str, batch: list[Instance]) -> list[Prediction]:
    try:
        preds = list(await predictor.apredict(task, batch))
    except Exception as exc:  # a predictor bug fails its batch, never the run
        return [Prediction.failure(f"predictor raised {type(exc).__name__}: {exc}") for _ in batch]
    if len(preds) != len(batch):
        return [Prediction.failure(f"predictor returned {len(preds)} answers for {len(batch)} instances") for _ in batch]
    return preds


async def arun_tasks(
    dialogues: Sequence[Dialogue],
    tasks: Sequence[str],
    predictor: Predictor,
    profile: str = "paper",
    out_dir: str | Path | None = ".",
    resume: bool = True,
    progress: bool = True,
    *,
    judge: Judge | None = None,
    bertscore: BertScore | str | None = "auto",
    concurrency: int = 8,
    retry_failed: bool = False,
    print_table: bool = True,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Async form of :func:`run_tasks` (for callers already inside an event loop);
    ``out_dir=None`` keeps everything in memory (see :func:`evaluate`)."""
    task_list = list(dict.fromkeys(check_task(t) for t in tasks))
    profile = check_profile(profile)
    run_info = {"predictor": getattr(predictor, "name", type(predictor).__name__), "profile": profile}
    describe = predictor.describe() if hasattr(predictor, "describe") else {"name": run_info["predictor"]}
    out: Path | None = None
    details_path: Path | None = None
    done: dict[tuple[str, str], dict] = {}
    if out_dir is not None:  # else in memory: no files, nothing to resume
        out, details_path, done = _prepare_out_dir(Path(out_dir), run_info, describe, task_list, resume, retry_failed, settings)
    scoring = _Scoring(judge, bertscore)
    results: dict[str, Any] = {}
    for task in task_list:
        iset: InstanceSet = build_instances(dialogues, task, profile)
        reason = predictor.supports(task)
        if reason:
            results[task] = {"skipped": reason, "n": 0, "failed": 0, "instances": len(iset)}
            continue
        todo = [inst for inst in iset if (task, inst.id) not in done]
        if todo:
            predictor.prepare(task, profile, dialogues)
            await _run_batches(task, profile, todo, len(iset), predictor, scoring, details_path, done, progress, concurrency)
        records = [done[(task, inst.id)] for inst in iset if (task, inst.id) in done]
        res = aggregate(task, records, profile)
        res.update({"profile": profile, "predictor": run_info["predictor"]})
        if iset.excluded:
            res["excluded"] = dict(iset.excluded)
        if task in GENERATIVE_TASKS:
            res.update(scoring.describe())
            gen = describe.get("generative_tasks") if isinstance(describe, dict) else None
            if gen:
                res["generator"] = gen
        results[task] = res
    if out is not None:
        atomic_write_text(out / RESULTS_FILE, json.dumps(_jsonable(results), indent=2, ensure_ascii=False))
    if print_table:
        print(format_table(results))
    return results


def _prepare_out_dir(
    out: Path, run_info: dict, describe: dict, task_list: list[str], resume: bool, retry_failed: bool, settings: dict | None
) -> tuple[Path, Path, dict[tuple[str, str], dict]]:
    """Check a resumed folder's settings, write ``run.json``, read finished instances."""
    out.mkdir(parents=True, exist_ok=True)
    details_path, run_path = out / DETAILS_FILE, out / RUN_FILE
    if resume and run_path.exists() and details_path.exists():
        previous = json.loads(run_path.read_text(encoding="utf-8"))
        clash = {k: (previous.get(k), v) for k, v in run_info.items() if previous.get(k) != v}
        if clash:
            raise ValueError(
                f"{out} holds a run with other settings {clash} (previous, now): use another output folder or resume=False"
            )
    if not resume and details_path.exists():
        details_path.unlink()
    atomic_write_text(run_path, json.dumps({**run_info, "tasks": task_list, "predictor_config": _jsonable(describe), **(settings or {})}, indent=2))
    done = read_details(details_path)
    if retry_failed:
        done = {k: v for k, v in done.items() if not v.get("failed")}
    return out, details_path, done


async def _run_batches(
    task: str,
    profile: str,
    todo: list[Instance],
    total: int,
    predictor: Predictor,
    scoring: _Scoring,
    details_path: Path | None,
    done: dict[tuple[str, str], dict],
    progress: bool,
    concurrency: int,
) -> None:
    from tqdm.auto import tqdm

    sem = asyncio.Semaphore(max(1, int(concurrency)))

    async def one(batch: list[Instance]) -> list[dict]:
        async with sem:
            preds = await _predict(predictor, task, batch)
            return await _score_batch(task, profile, batch, preds, scoring)

    bar = tqdm(total=total, initial=total - len(todo), desc=task, unit="inst", disable=not progress, leave=True)
    f = details_path.open("a", encoding="utf-8") if details_path is not None else None
    try:
        if f is not None and f.tell() > 0 and not _ends_with_newline(details_path):  # type: ignore[arg-type]
            f.write("\n")  # close a line torn by an interrupted run; never glue onto it
        for fut in asyncio.as_completed([one(b) for b in _batches(todo, max(1, int(predictor.batch_size)))]):
            records = await fut
            for rec in records:
                if f is not None:
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                done[(task, rec["id"])] = rec
            if f is not None:
                f.flush()  # a finished batch survives an interruption (resume)
            bar.update(len(records))
    finally:
        if f is not None:
            f.close()
        bar.close()


def evaluate(
    dialogues: Sequence[Dialogue],
    tasks: Sequence[str],
    predictor: Predictor,
    profile: str = "paper",
    **kwargs: Any,
) -> dict[str, Any]:
    """The figures of :func:`run_tasks`, computed in memory: no files, no progress bar, no
    table (for callbacks and notebooks). Keyword options as for :func:`run_tasks`
    (``bertscore`` defaults to ``None`` here: nothing is loaded unless asked)."""
    kwargs.setdefault("bertscore", None)
    kwargs.setdefault("print_table", False)
    return asyncio.run(arun_tasks(dialogues, tasks, predictor, profile, None, False, False, **kwargs))


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as fh:
        fh.seek(-1, 2)
        return fh.read(1) == b"\n"


def run_tasks(
    dialogues: Sequence[Dialogue],
    tasks: Sequence[str],
    predictor: Predictor,
    profile: str = "paper",
    out_dir: str | Path = ".",
    resume: bool = True,
    progress: bool = True,
    **kwargs: Any,
) -> dict[str, Any]:
    """Evaluate ``predictor`` on ``tasks`` over ``dialogues`` and return the ``tasks.json``
    content (see the module docstring for the files written in ``out_dir``).

    ``tasks``: names among ``itp rpp stp ssp er vp`` (case-insensitive; ``ValueError`` for
    others); ``profile``: ``paper`` or ``released``. ``resume=True`` skips instances already
    in ``out_dir/details.jsonl`` (``ValueError`` if that run used another predictor or
    profile); ``resume=False`` starts the file afresh. Keyword options: ``judge`` (an ER/VP
    :class:`~rescue_env.tasks.scorers.Judge`; default the offline embedding judge),
    ``bertscore`` (``"auto"``: the offline BERTScore; ``None``: none; or a scorer),
    ``concurrency`` (batches in flight), ``retry_failed`` (ask failed instances again),
    ``print_table``, ``settings`` (extra keys for ``run.json``).
    """
    return asyncio.run(arun_tasks(dialogues, tasks, predictor, profile, out_dir, resume, progress, **kwargs))


# ---------------------------------------------------------------------------------------------
# the table


def _fmt(v: Any, scale: float) -> str:
    if v is None:
        return ""
    v = float(v) * scale
    return f"{v:.2f}" if scale != 1 or abs(v) >= 1 else f"{v:.4f}"


def format_table(results: dict[str, Any]) -> str:
    """This run's main figures beside the paper's (mean of 10 zero-shot LLMs / best)."""
    from tabulate import tabulate

    rows = []
    notes: list[str] = []
    for task, key, label, scale in TABLE_ROWS:
        res = results.get(task)
        if res is None:
            continue
        if "skipped" in res:
            if key == next(k for t, k, *_ in TABLE_ROWS if t == task):
                rows.append([task.upper(), "skipped", res["skipped"][:40], "", "", "", "", "", ""])
            continue
        if key not in res:
            continue
        if task in GENERATIVE_TASKS and key not in ("intensity_match", "bertscore_f1"):
            kind = (res.get("judge") or {}).get("kind", "")
            if kind and kind != "llm":
                label = f"{label} [{kind} proxy]"
        ref = REFERENCE.get((task, key), (None, None))
        scn = res.get("by_scenario", {})
        rows.append(
            [
                task.upper(),
                label,
                _fmt(res[key], scale),
                _fmt(scn.get("couple", {}).get(key), scale),
                _fmt(scn.get("family", {}).get(key), scale),
                res["n"],
                res["failed"],
                "" if ref[0] is None else ref[0],
                "" if ref[1] is None else ref[1],
            ]
        )
    for task in ("er", "vp"):
        res = results.get(task)
        if res and "skipped" not in res:
            j = res.get("judge", {})
            notes.append(f"{task.upper()}: judge {j.get('name', '?')} ({j.get('kind', '?')}); BERTScore {res.get('bertscore_model', '?')}")
            if res.get("generator"):
                notes.append(f"{task.upper()}: answers from the {res['generator']} baseline")
    if results.get("vp") and "skipped" not in results["vp"]:
        notes.append("VP: ours is the recomputed sum 0-6; the paper's 3.58/4.08 is on its 1-5 judge scale")
    total = sum(r.get("n", 0) for r in results.values() if isinstance(r, dict))
    notes.append(f"reference: the paper's zero-shot LLMs (mean of 10 / best); this run has {total} instances in all")
    header = ["task", "metric", "run", "couple", "family", "n", "failed", "paper mean", "paper best"]
    return tabulate(rows, headers=header, tablefmt="github") + "\n" + "\n".join(f"  {n}" for n in notes)
