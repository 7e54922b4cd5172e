"""``rescue summarize DIR``: one table of every job of a sweep (or any folder of runs),
grouped by the swept keys, aggregated over seeds the way RL papers report.

Every folder under ``DIR`` holding a ``metrics.json`` of ``rescue train`` or ``rescue
rollout`` is a job; its Hydra overrides (``.hydra/overrides.yaml``) say what it ran. Keys whose
value differs between jobs are the swept keys; jobs that differ only in ``seed`` (the seed
keys, ``--seed-key``) form one group. The folds of a group k-fold (``holdout_fold``: each
held-out set once) are combined first, seed by seed, into one cross-validated score per seed:
σ* and Δ the mean over the folds, real agreement pooled over the folds' instances (R@1:
right answers over all their instances; ITP F1: the folds' F1 weighted by instances). Jobs
of a k-fold and jobs of the plain ``holdout`` split never share a group (a ``split`` column
tells them apart). Per group and agent, over the group's seeds:

- the mean σ* return with its 95 % Student-t interval across seeds;
- the interquartile mean (IQM) with its 95 % stratified-bootstrap interval (``rliable``,
  Agarwal et al. 2021: robust to an outlying seed; with fewer than 4 seeds the IQM trims
  nothing and equals the mean, the interval is still the bootstrap's);
- the paired comparison: each job's own paired Δ σ* return to the reference agent (same
  episodes within a job), averaged across seeds with its 95 % t-interval.

A job's score is its held-out final evaluation for ``rescue train`` (``final_eval``: the
policy and the non-learned agents) and its pooled σ* return for ``rescue rollout``.

A job with failed episodes (an LLM rollout that exited 3) is not ok: its mean covers only the
episodes that finished, so it is left out of the means (``--include-failed`` keeps it), its
failures are shown per job, and the command exits 3, as it does when a job has no metrics.

Writes into ``DIR``: ``summary.csv`` (one row per group and agent), ``summary.json``,
``summary.png`` (IQM and mean with intervals) and ``jobs.csv`` (the index: each job folder,
its overrides, its status). The Hydra callback :class:`SummarizeCallback` runs this at the
end of every ``-m`` sweep of ``rescue train`` / ``rescue rollout``.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import sys
import warnings
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from hydra.experimental.callback import Callback
from tabulate import tabulate

from rescue_env.experiments.errors import EXIT_OK, EXIT_SOME_FAILED, EXIT_USER_ERROR, report_error
from rescue_env.experiments.sweep import read_status
from rescue_env.atomic import atomic_open, atomic_write_text, save_figure
from rescue_env.jsonl import dumps, finite_or_null
from rescue_env.rollout import mean_ci

log = logging.getLogger(__name__)

#: agreement with real therapists (held-out real dialogues, %) shown beside σ*
AGREEMENT = {"itp_f1": "real ITP\nF1 %", "stp_r1": "real STP\nR@1 %", "ssp_r1": "real SSP\nR@1 %"}
#: the policy's moves in the simulator that are the behaviour prior's most probable there (%):
#: whether it acts on simulated states as it answers real ones (``sim_agreement``)
SIM_AGREEMENT = {"sim_target_r1": "sim target\n= prior %", "sim_strategy_r1": "sim strategy\n= prior %"}

#: Override keys that name a seed (jobs differing only in these are one group).
SEED_KEYS = ("seed",)
#: the key of a group k-fold's fold (``rescue train holdout_fold=i``): a seed's folds are
#: combined into one cross-validated score before seeds are aggregated
FOLD_KEY = "holdout_fold"
#: the task each agreement figure scores (its instance count weighs a job when jobs are pooled)
AGREEMENT_TASK = {"itp_f1": "itp", "stp_r1": "stp", "ssp_r1": "ssp"}


@dataclass
class Job:
    """One run folder of the sweep."""

    path: Path
    overrides: dict[str, str]
    kind: str = ""  # train | rollout | "" (no usable metrics)
    #: agent -> σ* return of this job (held-out final evaluation / pooled rollout figure)
    scores: dict[str, float] = field(default_factory=dict)
    #: agent -> this job's paired Δ σ* return to the reference agent
    deltas: dict[str, float] = field(default_factory=dict)
    reference: str | None = None
    status: str = "ok"
    #: episodes of this job (all agents) and how many of them failed
    episodes: int = 0
    failed: int = 0
    #: predictor -> agreement with real therapists (``rescue train`` with prior.agreement)
    agreement: dict[str, dict[str, float]] = field(default_factory=dict)
    #: the policy's moves in the simulator against the prior (``sim_agreement``), if recorded
    sim: dict[str, Any] = field(default_factory=dict)
    #: the job's composed config (``.hydra/config.yaml``; empty when absent)
    config: dict[str, Any] = field(default_factory=dict)
    #: folds of a group k-fold combined into this job (:func:`combine_folds`; 0: one split)
    folds: int = 0
    #: the interpolated settings resolved so far (each resolution builds the whole config,
    #: and grouping asks for the same keys many times)
    resolved: dict[str, Any] = field(default_factory=dict, repr=False)

    def setting(self, key: str) -> str:
        """The job's value of an override key, as its composed config holds it where the key
        names a setting there (``prior.x=null`` and no override at all are then one value,
        as are ``lam=1`` and ``lam=1.0``, and ``prior.real_coef=0.3`` and the
        ``${prior.coef}`` it follows at ``prior.coef=0.3``), else its override text (``""``
        when absent)."""
        node: Any = self.config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return self.overrides.get(key, "")
            node = node[part]
        if isinstance(node, str) and "${" in node:
            if key not in self.resolved:
                self.resolved[key] = _resolved(self.config, key, node)
            node = self.resolved[key]
        return json.dumps(node, sort_keys=True, default=str)


def _resolved(config: dict[str, Any], key: str, raw: str) -> Any:
    """The value of an interpolation at ``key`` of a job's saved config; ``raw`` where it
    does not resolve outside its run (``${hydra:…}``, a resolver of another program)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from rescue_env.experiments.config import register_resolvers

    register_resolvers()
    try:
        return OmegaConf.select(OmegaConf.create(config), key, throw_on_resolution_failure=True)
    except OmegaConfBaseException:
        return raw


def _overrides(run: Path) -> dict[str, str]:
    path = run / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return {}
    out = {}
    for item in yaml.safe_load(path.read_text(encoding="utf-8")) or []:
        key, _, value = str(item).partition("=")
        key = key.lstrip("+~")
        if not key.startswith("hydra.") and not key.startswith("hydra/"):
            out[key] = value
    return out


def _config(run: Path) -> dict[str, Any]:
    path = run / ".hydra" / "config.yaml"
    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    except yaml.YAMLError:
        return {}  # an unreadable config: the override texts decide
    return config if isinstance(config, dict) else {}


def read_job(run: Path) -> Job:
    """The scores of one run folder (``status`` says why a job has none)."""
    job = Job(run, _overrides(run), config=_config(run))
    if (record := read_status(run)) is not None and record["exit_code"] in (1, 2):  # the sweep job failed
        job.status = f"failed (exit {record['exit_code']}): {record.get('error', '')}"
        return job
    path = run / "metrics.json"
    if not path.is_file():
        job.status = "no metrics.json (unfinished or failed)"
        return job
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        job.status = f"unreadable metrics.json: {exc}"
        return job
    if "final_eval" in m:
        job.kind, job.reference = "train", "heuristic"
        for agent, fig in m["final_eval"].items():
            job.scores[agent] = float(fig["sigma_return_mean"])
            if fig.get("paired_vs_heuristic") and fig["paired_vs_heuristic"].get("mean") is not None:
                job.deltas[agent] = float(fig["paired_vs_heuristic"]["mean"])
        job.agreement = {k: v for k, v in (m.get("real_agreement") or {}).items() if isinstance(v, dict) and k != "dialogues"}
        job.sim = m.get("sim_agreement") or {}
    elif "agents" in m:
        job.kind, job.reference = "rollout", m.get("compare_to")
        for agent, fig in m["agents"].items():
            if fig.get("sigma_return_mean") is not None:
                job.scores[agent] = float(fig["sigma_return_mean"])
            if fig.get("paired") and fig["paired"].get("n") and fig["paired"].get("mean") is not None:
                job.deltas[agent] = float(fig["paired"]["mean"])
            job.episodes += int(fig.get("episodes") or 0)
            job.failed += int(fig.get("failed") or 0)
        if job.failed:
            job.status = f"{job.failed} of {job.episodes} episodes failed"
    else:
        job.status = "metrics.json of another command"
    return job


def find_jobs(root: Path) -> list[Job]:
    """Every run folder under ``root`` (a folder with ``.hydra/`` or ``metrics.json``), in
    job-number order when the folder names are numbers."""
    runs = {p.parent for p in root.rglob("metrics.json")} | {p.parent.parent for p in root.rglob(".hydra/overrides.yaml")}

    def order(p: Path) -> tuple:
        rel = p.relative_to(root).parts
        return tuple((0, int(x), "") if x.isdigit() else (1, 0, x) for x in rel)

    return [read_job(r) for r in sorted(runs, key=order)]


def swept_keys(jobs: Sequence[Job]) -> list[str]:
    """Override keys whose value differs between jobs (:meth:`Job.setting`: a key missing from
    a job counts as its config's value, or as a value of its own), in first-seen order."""
    keys = list(dict.fromkeys(k for j in jobs for k in j.overrides))
    return [k for k in keys if len({j.setting(k) for j in jobs}) > 1]


def iqm_intervals(scores: dict[str, np.ndarray], reps: int, seed: int = 0) -> dict[str, tuple[float, float, float]]:
    """IQM and its 95 % stratified-bootstrap interval per key (``rliable``); ``scores[key]``
    is a (runs, tasks) matrix."""
    from absl import logging as absl_logging
    from rliable import library as rly
    from rliable import metrics

    # absl's handler keeps the sys.stderr of its import and closes it when logging is next
    # reconfigured (Hydra's next job, in the same process) if sys.stderr has changed since:
    # pointing it at the process's own stderr, which it never closes, keeps that stream open
    absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__

    usable = {k: v for k, v in scores.items() if v.shape[0] >= 2}
    out = {k: (float(metrics.aggregate_iqm(v)), math.nan, math.nan) for k, v in scores.items() if k not in usable}
    if usable:
        absl = logging.getLogger("absl")  # rliable logs one INFO line per key
        level = absl.level
        absl.setLevel(logging.WARNING)
        # absl's first log call gives the root logger a stderr handler bound to the sys.stderr
        # of that moment; it would outlive this call (and a redirected stderr), so it goes
        handlers = list(logging.root.handlers)
        try:
            with warnings.catch_warnings():
                # arch (under rliable) deprecates the RandomState that rliable hands it
                warnings.simplefilter("ignore", FutureWarning)
                point, ci = rly.get_interval_estimates(
                    usable, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=reps, random_state=np.random.RandomState(seed)
                )
        finally:
            absl.setLevel(level)
            for handler in [h for h in logging.root.handlers if h not in handlers]:
                logging.root.removeHandler(handler)
        for k in usable:
            out[k] = (float(point[k][0]), float(ci[k][0][0]), float(ci[k][1][0]))
    return out


def pooled(job: Job, include_failed: bool) -> bool:
    """Whether ``job`` enters the means: it has scores and is ok (or only has failed
    episodes and ``include_failed``)."""
    return bool(job.kind) and (job.status == "ok" or (include_failed and job.failed > 0))


def pooled_agreement(members: Sequence[Job], predictor: str, metric: str) -> float | None:
    """``predictor``'s agreement figure over ``members``, each job weighted by its instance
    count: seeds of one split weigh alike (the plain mean), and the folds of a group k-fold
    pool into R@1 over all their instances (right answers / instances; for ITP F1, the
    instance-weighted mean of the folds' F1). None when no member has it, or none has an
    instance."""
    vals, weights = [], []
    for j in members:
        fig = j.agreement.get(predictor)
        if fig is None or fig.get(metric) is None:
            continue
        vals.append(float(fig[metric]))
        weights.append(float((fig.get("n") or {}).get(AGREEMENT_TASK[metric], 1) or 0))
    if not vals or sum(weights) <= 0:
        return None
    return float(np.average(vals, weights=weights))


def _natural(key: Sequence[str]) -> tuple:
    """A group's sort key: numbers by value (``prior.coef`` 0.03 before 0.1 before 1), other
    values as text after them."""
    out = []
    for value in key:
        try:
            number = float(json.loads(value))
        except (TypeError, ValueError):
            out.append((1, 0.0, value))
        else:
            out.append((0, number, ""))
    return tuple(out)


def _is_fold(job: Job) -> bool:
    return job.setting(FOLD_KEY) not in ("", "null")


def _means(figures: Sequence[dict[str, Any]], keys: Sequence[str] | None = None) -> dict[str, float]:
    """Per key (``keys``, or every key of ``figures``), the mean of the figures that have it
    (``None`` counts as missing); keys no figure has are left out."""
    keys = keys if keys is not None else list(dict.fromkeys(k for f in figures for k in f))
    return {k: float(np.mean(vals)) for k in keys if (vals := [f[k] for f in figures if f.get(k) is not None])}


def combine_folds(members: Sequence[Job], seed_keys: Sequence[str]) -> list[Job]:
    """One job per seed: a seed's folds of a group k-fold combined (see the module docstring);
    jobs of the plain split pass through. The combined job's ``folds`` counts its folds."""
    by_seed: dict[tuple[str, ...], list[Job]] = defaultdict(list)
    for j in members:
        by_seed[tuple(j.setting(k) for k in seed_keys)].append(j)
    out = []
    for seed, seed_jobs in by_seed.items():
        folds = [j.setting(FOLD_KEY) for j in seed_jobs]
        if len(set(folds)) < len(folds):  # a rerun of the same seed (and fold) adds no evidence
            same = " ".join(f"{k}={v}" for k, v in zip(seed_keys, seed)) + (" and fold" if _is_fold(seed_jobs[0]) else "")
            log.warning("%s: %d jobs of one setting with the same %s; each is counted as if it were another seed: keep one",
                        ", ".join(str(j.path) for j in seed_jobs), len(seed_jobs), same)
        if not _is_fold(seed_jobs[0]):
            out.extend(seed_jobs)
            continue
        first = seed_jobs[0]
        cv = Job(first.path, first.overrides, first.kind, reference=first.reference, config=first.config)
        cv.folds = len({j.setting(FOLD_KEY) for j in seed_jobs})
        try:
            expected = int(json.loads(first.setting("holdout_folds")))
        except (TypeError, ValueError):
            expected = cv.folds
        if cv.folds < expected:  # its σ* and agreement leave out the missing folds' dialogues
            log.warning("%s: %d of the %d folds of its seed are here; its cross-validated figures cover those only", first.path, cv.folds, expected)
        cv.scores, cv.deltas = _means([j.scores for j in seed_jobs]), _means([j.deltas for j in seed_jobs])
        for predictor in dict.fromkeys(k for j in seed_jobs for k in j.agreement):
            fig: dict[str, Any] = {m: v for m in AGREEMENT if (v := pooled_agreement(seed_jobs, predictor, m)) is not None}
            fig["n"] = {t: sum(int(((j.agreement.get(predictor) or {}).get("n") or {}).get(t, 0)) for j in seed_jobs) for t in AGREEMENT_TASK.values()}
            cv.agreement[predictor] = fig
        cv.sim = _means([j.sim for j in seed_jobs], ("prior_target_r1", "prior_strategy_r1"))
        cv.episodes, cv.failed = sum(j.episodes for j in seed_jobs), sum(j.failed for j in seed_jobs)
        out.append(cv)
    return out


def summarize(
    root: str | Path, *, seed_keys: Sequence[str] = SEED_KEYS, reps: int = 2000, plot: bool = True, include_failed: bool = False
) -> dict[str, Any]:
    """Summarise the runs under ``root`` (see the module docstring); returns what
    ``summary.json`` holds. A job with failed episodes is left out of the means unless
    ``include_failed``. Raises ``FileNotFoundError`` when ``root`` has no run."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder")
    jobs = find_jobs(root)
    if not jobs:
        raise FileNotFoundError(f"no run under {root}: expected folders with metrics.json (rescue train / rollout outputs)")
    swept = swept_keys(jobs)
    by = [k for k in swept if k not in seed_keys and k != FOLD_KEY]
    # a k-fold and the plain split are different evaluations: never one group
    mixed_splits = len({_is_fold(j) for j in jobs}) > 1
    groups: dict[tuple[str, ...], list[Job]] = defaultdict(list)
    left_out: dict[tuple[str, ...], int] = defaultdict(int)
    for j in jobs:
        key = (*(j.setting(k) for k in by), "k-fold" if _is_fold(j) else "holdout")
        if pooled(j, include_failed):
            groups[key].append(j)
        elif j.kind:
            left_out[key] += 1
    rows: list[dict[str, Any]] = []
    matrices: dict[str, np.ndarray] = {}
    for key, members in sorted(groups.items(), key=lambda kv: _natural(kv[0])):
        members = combine_folds(members, seed_keys)
        agents = list(dict.fromkeys(a for j in members for a in j.scores))
        for agent in agents:
            values = [j.scores[agent] for j in members if agent in j.scores]
            mean, half = mean_ci(values)
            deltas = [j.deltas[agent] for j in members if agent in j.deltas]
            d_mean, d_half = mean_ci(deltas) if deltas else (math.nan, math.nan)
            # shown as the first member's override (its config's value when it had none)
            shown = {k: members[0].overrides.get(k, members[0].setting(k)) for k in by}
            if mixed_splits:
                shown["split"] = key[-1]
            row = {**shown, "agent": agent, "seeds": len(values), "mean": mean, "ci95": half,
                   "reference": members[0].reference, "delta_mean": d_mean, "delta_ci95": d_half, "delta_seeds": len(deltas),
                   "failed": sum(j.failed for j in members), "jobs_left_out": left_out[key], "values": values,
                   "folds": max(j.folds for j in members)}
            # the second axis of a grounded run: agreement with real therapists (the policy's
            # own; the imitation agent's is the behaviour prior's)
            source = {"policy": "policy", "imitation": "prior"}.get(agent)
            for metric in AGREEMENT:
                if source and (pooled_figure := pooled_agreement(members, source, metric)) is not None:
                    row[metric] = pooled_figure
                # the majority baseline on the same held-out dialogues: the level to reach
                if agent == "policy" and (base := pooled_agreement(members, "majority", metric)) is not None:
                    row[f"majority_{metric}"] = base
            for metric, recorded in zip(SIM_AGREEMENT, ("prior_target_r1", "prior_strategy_r1")):
                vals = [j.sim[recorded] for j in members if agent == "policy" and j.sim.get(recorded) is not None]
                if vals:
                    row[metric] = float(np.mean(vals))
            rows.append(row)
            matrices[str(len(rows) - 1)] = np.asarray(values, dtype=float)[:, None]  # (seeds, 1 task)
    for i, (point, low, high) in iqm_intervals(matrices, reps).items():
        rows[int(i)].update(iqm=point, iqm_ci_low=low, iqm_ci_high=high)
    result = {"root": str(root), "swept": swept, "group_by": [*by, "split"] if mixed_splits else by, "seed_keys": list(seed_keys), "bootstrap_reps": reps,
              "include_failed": include_failed, "rows": rows,
              "jobs": [{"path": str(j.path.relative_to(root)), "kind": j.kind, "status": j.status, "episodes": j.episodes,
                        "failed": j.failed, "pooled": pooled(j, include_failed), "overrides": j.overrides} for j in jobs]}
    result["written"] = write_outputs(root, result, jobs, plot=plot)
    return result


def table_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The printed table (≤ 100 columns for a few swept keys)."""
    by = result["group_by"]
    ref = next((r["reference"] for r in result["rows"] if r.get("reference")), None)
    folds = any(r.get("folds") for r in result["rows"])  # a group k-fold: its folds per seed
    headers = [*by, "agent", "seeds", *(["folds"] if folds else []), "σ* return\nmean ± 95 %", "IQM\n[95 % CI]"]
    if ref:
        headers.append(f"Δ vs {ref}\nmean ± 95 %")
    # failed episodes in the pooled jobs (--include-failed) and jobs left out: shown when any
    faults = any(r.get("failed") or r.get("jobs_left_out") for r in result["rows"])
    if faults:
        headers.append("failed eps /\njobs left out")
    columns = {**AGREEMENT, **SIM_AGREEMENT}
    shown = [m for m in columns if any(m in r for r in result["rows"])]
    headers += [columns[m] for m in shown]
    out = []
    for r in result["rows"]:
        iqm = f"{r['iqm']:.2f}" + ("" if math.isnan(r["iqm_ci_low"]) else f" [{r['iqm_ci_low']:.2f}, {r['iqm_ci_high']:.2f}]")
        row = [*(r[k] for k in by), r["agent"], str(r["seeds"]), *([str(r.get("folds") or "")] if folds else []), _pm(r["mean"], r["ci95"]), iqm]
        if ref:
            row.append("reference" if r["agent"] == ref else ("-" if not r["delta_seeds"] else _pm(r["delta_mean"], r["delta_ci95"], signed=True)))
        if faults:
            row.append(f"{r.get('failed', 0)} / {r.get('jobs_left_out', 0)}")
        row += [f"{r[m]:.1f}" if m in r else "" for m in shown]
        out.append(row)
    return headers, out


def _pm(mean: float, half: float, signed: bool = False) -> str:
    m = f"{mean:+.2f}" if signed else f"{mean:.2f}"
    return m if half == 0 or math.isnan(half) else f"{m} ± {half:.2f}"


def write_outputs(root: Path, result: dict[str, Any], jobs: Sequence[Job], *, plot: bool = True) -> list[str]:
    """``summary.csv``, ``summary.json``, ``jobs.csv``, ``summary.png`` and, when the rows hold
    real agreement, ``frontier.png`` into ``root``; returns the names written."""
    written = ["summary.csv", "summary.json", "jobs.csv"]
    by = result["group_by"]
    fields = [*by, "agent", "seeds", "folds", "mean", "ci95", "iqm", "iqm_ci_low", "iqm_ci_high", "reference", "delta_mean", "delta_ci95", "delta_seeds",
              "failed", "jobs_left_out", *AGREEMENT, *SIM_AGREEMENT]
    with atomic_open(root / "summary.csv", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for r in result["rows"]:
            writer.writerow({k: (round(v, 4) if isinstance(v, float) and not math.isnan(v) else ("" if isinstance(v, float) else v)) for k, v in r.items()})
    atomic_write_text(root / "summary.json", dumps(finite_or_null(result), indent=1, default=float))
    keys = list(dict.fromkeys(k for j in jobs for k in j.overrides))
    with atomic_open(root / "jobs.csv", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["job", "kind", "status", "episodes", "failed", "pooled", *keys])
        pooled_paths = {j["path"] for j in result["jobs"] if j["pooled"]}
        for j in jobs:
            path = str(j.path.relative_to(root))
            writer.writerow([path, j.kind, j.status, j.episodes, j.failed, path in pooled_paths, *(j.overrides.get(k, "") for k in keys)])
    if plot and result["rows"]:
        plot_summary(result, root / "summary.png")
        written.append("summary.png")
        if any("stp_r1" in r for r in result["rows"]):
            from rescue_env.experiments.frontier import plot_frontier

            plot_frontier(result, root / "frontier.png")
            written.append("frontier.png")
    return written


def plot_summary(result: dict[str, Any], path: Path) -> Path:
    """IQM (bar, 95 % bootstrap CI) and mean (dot, 95 % t-interval) per group and agent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = result["group_by"]
    rows = result["rows"]
    groups = list(dict.fromkeys(tuple(r[k] for k in by) for r in rows))
    agents = list(dict.fromkeys(r["agent"] for r in rows))
    colors = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(agents)}
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(groups) * max(1, len(agents)) * 0.5 + 2), 4))
    w = 0.8 / max(1, len(agents))
    for gi, g in enumerate(groups):
        for ai, a in enumerate(agents):
            r = next((r for r in rows if tuple(r[k] for k in by) == g and r["agent"] == a), None)
            if r is None:
                continue
            x = gi + (ai - (len(agents) - 1) / 2) * w
            err = None if math.isnan(r["iqm_ci_low"]) else [[r["iqm"] - r["iqm_ci_low"]], [r["iqm_ci_high"] - r["iqm"]]]
            ax.bar(x, r["iqm"], w, yerr=err, capsize=3, color=colors[a], alpha=0.8, label=a if gi == 0 else None)
            ax.errorbar(x, r["mean"], yerr=None if math.isnan(r["ci95"]) else r["ci95"], fmt="o", color="black", ms=3, lw=0.8)
    ax.set_xticks(range(len(groups)), [", ".join(f"{k}={v}" for k, v in zip(by, g)) or "all jobs" for g in groups], rotation=15, fontsize=8)
    ax.set_ylabel("σ* return")
    ax.set_title("IQM across seeds (bars, 95 % stratified-bootstrap CI); mean (dots, 95 % t-interval)", fontsize=9)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
    plt.close(fig)
    return path


def print_summary(result: dict[str, Any]) -> str:
    headers, rows = table_rows(result)
    text = tabulate(rows, headers=headers, disable_numparse=True)
    bad = [j for j in result["jobs"] if j["status"] != "ok"]
    lines = [f"{len(result['jobs'])} job(s) under {result['root']}; grouped by {', '.join(result['group_by']) or 'nothing (seeds only)'}", text]
    baselines = {}  # the level the policy's real agreement is to reach, per group
    for r in result["rows"]:
        base = [f"{m.split('_')[0].upper()} {'F1' if m.endswith('f1') else 'R@1'} {r[f'majority_{m}']:.1f}" for m in AGREEMENT if f"majority_{m}" in r]
        if base:
            baselines[", ".join(f"{k}={r[k]}" for k in result["group_by"])] = ", ".join(base)
    if len(set(baselines.values())) == 1:  # the same held-out dialogues for every group: one line
        lines.append(f"majority baseline on the same held-out real dialogues: {next(iter(baselines.values()))} %")
    else:
        lines += [f"majority baseline on the same held-out real dialogues{' (' + where + ')' if where else ''}: {figs} %" for where, figs in baselines.items()]
    for j in bad:
        if j["pooled"]:
            lines.append(f"kept {j['path']} in the means (--include-failed): {j['status']}")
        elif j["failed"]:
            lines.append(f"left out {j['path']}: {j['status']} (its mean covers the rest only; --include-failed keeps it)")
        else:
            lines.append(f"skipped {j['path']}: {j['status']}")
    lines.append(f"wrote {', '.join(result.get('written', []))} in {result['root']}")
    return "\n".join(lines)


class SummarizeCallback(Callback):
    """Hydra callback: :func:`summarize` the sweep folder when a multirun ends."""

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        root = Path(config.hydra.sweep.dir)
        try:
            result = summarize(root)
        except Exception as exc:  # a summary must not turn a finished sweep into a failure
            log.warning("could not summarise %s: %s (run `rescue summarize %s`)", root, exc, root)
            return
        log.info(print_summary(result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rescue summarize", description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", help="a sweep folder (multirun/...) or any folder of run folders")
    parser.add_argument("--seed-key", action="append", dest="seed_keys", help="override key naming a seed (default: seed); repeatable")
    parser.add_argument("--reps", type=int, default=2000, help="bootstrap resamples of the IQM interval (default 2000)")
    parser.add_argument("--no-plot", action="store_true", help="skip summary.png")
    parser.add_argument("--include-failed", action="store_true",
                        help="keep jobs with failed episodes in the means (their finished episodes only)")
    args = parser.parse_args(argv)
    try:
        result = summarize(args.dir, seed_keys=args.seed_keys or SEED_KEYS, reps=args.reps, plot=not args.no_plot,
                           include_failed=args.include_failed)
    except FileNotFoundError as exc:
        report_error(str(exc), "rescue summarize")
        return EXIT_USER_ERROR
    print(print_summary(result))
    # a job left out or with failures: the table is not the whole sweep
    return EXIT_SOME_FAILED if any(j["status"] != "ok" for j in result["jobs"]) else EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
