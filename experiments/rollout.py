"""``rescue rollout``: the main job — closed-loop episodes of therapist agents on the seed
dialogues, with a summary table, metrics files, plots and a one-page HTML report.

Run folder (``hydra.run.dir``): ``episodes.jsonl`` (benchmark schema + per-row state, one
episode per line, appended as episodes finish; a rerun with the same folder skips finished
episodes), ``run_config.json`` (the settings that define them: a rerun with others is
refused, see :mod:`experiments.run_record`), ``metrics.json``, ``summary.csv``, ``plots/``,
``report.html``. Exit code 3 when some episodes failed (:mod:`experiments.errors`).

LLM runs (``dynamics=llm`` and/or an ``llm`` agent) play their episodes concurrently over one
LLM client (:func:`run_concurrent`): at most ``2 × llm.max_concurrency`` episodes in flight,
requests bounded by ``llm.max_concurrency``. An episode whose calls fail for good is recorded
as failed with its reason (a rerun in the same folder tries it again) while the others go on;
at the end ``episodes.jsonl`` is rewritten in the canonical order (agent, seed dialogue,
episode), so interrupted-and-resumed, concurrent and replayed runs give the same file. The
summary, ``metrics.json`` (``llm``) and ``report.html`` add the LLM usage: calls, tokens,
cache hits, retries, failures, latency percentiles, episodes per hour.
"""

from __future__ import annotations

import asyncio
import copy
import csv
import functools
import gc
import html
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from tabulate import tabulate
from tqdm import tqdm

from agents import make_agent
from agents.sb3 import load_policy, policy_scenario
from experiments.common import load_playable, run_dir
from experiments.config import env_config, make_llm_backend, register_configs, reward_config
from experiments.errors import EXIT_SOME_FAILED, UserError, record_outcome, user_errors
from rescue_env.atomic import atomic_open, atomic_write_text
from rescue_env.data import load_dialogues, resolve_data_paths
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.comparison import compare
from rescue_env.report import console_rows, csv_rows, write_report
from rescue_env.rollout import EpisodeJob, EpisodeJournal, EpisodeRecord, arun_episodes, read_journal, run_episode

log = logging.getLogger(__name__)
register_configs()


def agent_names(cfg: DictConfig) -> list[tuple[str, str | None]]:
    """(agent name, policy file) pairs to run."""
    if cfg.agent.name:
        return [(cfg.agent.name, cfg.agent.policy)]
    names = [(str(a), None) for a in cfg.agents]
    if cfg.policy:
        names.append(("trained", cfg.policy))
    return names


def load_finished(path: Path) -> dict[str, EpisodeRecord]:
    """Episodes already in ``episodes.jsonl``; from the first line that is not a whole
    episode on, the file is cut (the rest kept in a backup) and those episodes are redone
    (:func:`rescue_env.rollout.read_journal`)."""
    return {rec.key: rec for _, rec in read_journal(path)}


def make_env(cfg: DictConfig, scenario: str, dialogues: list | str, backend: Any = None) -> GroupSupportEnv:
    """The rollout env of ``scenario`` on ``dialogues`` (a list, or a data path: envs made
    from one path share its parse and start states); ``backend`` (e.g. a shared LLM client
    model) overrides ``dynamics.name``."""
    dynamics: Any = backend if backend is not None else cfg.dynamics.name
    if dynamics == "llm":
        dynamics = make_llm_backend(cfg, scenario)
    return GroupSupportEnv(
        config=env_config(cfg, scenario=scenario, record_transcript=True),
        dynamics=dynamics,
        params=cfg.dynamics.params,
        heterogeneity=cfg.dynamics.heterogeneity,
        data_path=dialogues,
        reward=reward_config(cfg),
    )


def trained_scenario(policy: str) -> str | None:
    """The scenario a saved policy acts in (read once per file version, not per scenario)."""
    path = Path(policy)
    return _trained_scenario(str(path.resolve()), path.stat().st_mtime_ns if path.exists() else 0)


@functools.lru_cache(maxsize=16)
def _trained_scenario(path: str, mtime_ns: int) -> str | None:
    return policy_scenario(load_policy(path))


def run(cfg: DictConfig, out: Path) -> dict[str, Any]:
    """The rollout job (callable without Hydra's CLI for tests). ``env.scenario`` chooses the
    seed dialogues: ``all`` (the default) every scenario in the data, else that one."""
    t0 = time.perf_counter()
    # every group must fit its env (env.max_members): an error naming the sample, never a cut
    dialogues, source = load_playable(cfg.data.path, cfg.data.strict, cfg.env.max_members)
    # the imitation prior is fitted on every member of every group: no size limit there
    imitation_data = load_dialogues(cfg.imitation_data) if cfg.imitation_data else dialogues
    if cfg.episodes < 1:
        raise ValueError(f"episodes must be at least 1, got {cfg.episodes}")
    scenarios = select_scenarios(cfg.env.scenario, dialogues, source)
    dialogues = shard_of([d for d in dialogues if d.scenario in scenarios], cfg.shard)
    scenarios = [s for s in scenarios if any(d.scenario == s for d in dialogues)]
    names = agent_names(cfg)
    out.mkdir(parents=True, exist_ok=True)
    episodes_path = out / "episodes.jsonl"
    finished = load_finished(episodes_path)
    records: dict[str, list[EpisodeRecord]] = {name: [] for name, _ in names}
    total = len(names) * cfg.episodes * len(dialogues)
    bar = tqdm(total=total, desc="episodes", unit="ep", disable=not cfg.progress)
    # LLM runs play their episodes concurrently; calibrated ones one at a time, below
    usage = run_concurrent(cfg, out, dialogues, scenarios, names, imitation_data, records, bar) if uses_llm(cfg) else None
    with episodes_path.open("a", encoding="utf-8") as sink:
        for scenario in scenarios if usage is None else ():
            env = make_env(cfg, scenario, dialogues)
            for name, policy in names:
                if policy and trained_scenario(policy) not in (None, scenario):
                    # a trained policy acts in the scenario it was trained on only
                    log.info(f"note: {name} ({policy}) was trained for another scenario; not run on {scenario}")
                    continue
                agent = make_agent(
                    name, scenario, encoding=env.encoding, seed=cfg.seed, imitation_data=imitation_data,
                    policy=policy, prior=cfg.agent.prior, deterministic=cfg.agent.deterministic, horizon=cfg.env.horizon,
                )
                for d in env.dialogues:
                    for e in range(cfg.episodes):
                        key = f"rollout/{name}/{d.sample_id}/ep{e}"
                        if key in finished:
                            records[name].append(finished[key])
                            bar.update()
                            continue
                        rec = run_episode(env, agent, d.sample_id, e, cfg.seed)
                        rec.agent = name
                        # one write per line: a crash leaves whole lines (a torn tail is skipped on resume)
                        sink.write(json.dumps(rec.to_json(), ensure_ascii=False) + "\n")
                        sink.flush()
                        records[name].append(rec)
                        bar.update()
    bar.close()
    comparison = compare(records, cfg.compare_to)
    print_summary(comparison)
    elapsed = time.perf_counter() - t0
    metrics = {"source": source, "episodes_per_seed": cfg.episodes, "seed": cfg.seed, "elapsed_s": elapsed, **comparison}
    if usage is not None:
        log.info(tabulate(usage_rows(usage), headers=["LLM usage", ""]))
        headers, by_role = role_rows(usage)
        if by_role:
            log.info(tabulate(by_role, headers=headers))
        metrics["llm"] = usage
    write_figures(out, metrics, comparison)
    if cfg.report:
        sections = [("LLM usage", usage_html(usage))] if usage is not None else []
        report = write_report(
            out, comparison, records, config_text=OmegaConf.to_yaml(cfg), snapshots=cfg.snapshots, extra_sections=sections
        )
        log.info(f"report: {report}  (every column, per scenario, with a glossary)")
    log.info(f"run folder: {out}  ({elapsed_text(t0)})")
    return metrics


def select_scenarios(scenario: str, dialogues: list, source: str) -> list[str]:
    """The scenarios a rollout plays: ``env=all`` every one in the data, ``env=couple`` /
    ``env=family`` that one (an error when the data has none of it)."""
    present = [s for s in ("couple", "family") if any(d.scenario == s for d in dialogues)]
    if scenario == "all":
        return present
    if scenario not in ("couple", "family"):
        raise UserError(f"env.scenario must be couple, family or all, got {scenario!r}")
    if scenario not in present:
        raise UserError(f"env={scenario}: {source} holds no {scenario} dialogues (it holds {', '.join(present) or 'none'}); use env=all")
    return [scenario]


def shard_of(dialogues: list, shard: str | None) -> list:
    """The seed dialogues of shard ``"i/n"`` (every n-th by sample id, starting at i), all of
    them for None; every agent plays the same shard, so the shards' episodes pair up."""
    if shard is None:
        return dialogues
    try:
        i, n = (int(x) for x in str(shard).split("/"))
    except ValueError:
        raise UserError(f"shard must be 'i/n' with integers, e.g. shard=0/4, got {shard!r}") from None
    if not 0 <= i < n:
        raise UserError(f"shard {shard!r}: need 0 ≤ i < n")
    ordered = sorted(dialogues, key=lambda d: d.sample_id)
    picked = {d.sample_id for d in ordered[i::n]}
    if not picked:
        raise UserError(f"shard {shard!r} is empty: only {len(ordered)} seed dialogues")
    return [d for d in dialogues if d.sample_id in picked]


def print_summary(comparison: dict[str, Any]) -> None:
    """The console summary: the columns that fit 100 characters, scenario rows under each
    agent; every column is in ``summary.csv`` and ``report.html``."""
    headers, rows = console_rows(comparison)
    log.info(console_table(headers, rows))
    if comparison["left_out"]:
        for scenario, agents in comparison["left_out"].items():
            log.info(f"note: {scenario} is left out of the pooled rows: {', '.join(agents)} did not play it")


def console_table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain right-aligned table (agent left) with two spaces between columns; no extra
    header padding, so the summary fits 100 columns."""
    import tabulate as tab

    padding, tab.MIN_PADDING = tab.MIN_PADDING, 0  # tabulate pads headers by 2 otherwise
    try:
        return tab.tabulate(rows, headers=headers, disable_numparse=True, colalign=("left",) + ("right",) * (len(headers) - 1))
    finally:
        tab.MIN_PADDING = padding


def elapsed_text(t_run: float) -> str:
    """'X s' since the command started (imports included) and the part in this job."""
    from experiments import STARTED

    job = time.perf_counter() - t_run
    total = time.perf_counter() - STARTED
    return f"{total:.1f} s since the command started, {job:.1f} s in this job" if total > job + 0.05 else f"{job:.1f} s"


def uses_llm(cfg: DictConfig) -> bool:
    """LLM clients or an LLM therapist: the run goes through :func:`run_concurrent`."""
    return cfg.dynamics.name == "llm" or any(name == "llm" for name, _ in agent_names(cfg))


def run_concurrent(
    cfg: DictConfig,
    out: Path,
    dialogues: list,
    scenarios: list[str],
    names: list[tuple[str, str | None]],
    imitation_data: list,
    records: dict[str, list[EpisodeRecord]],
    bar: tqdm,
) -> dict[str, Any]:
    """Play the run's episodes concurrently over one LLM client, appending each to
    ``episodes.jsonl`` as it finishes and filling ``records`` (canonical order); returns the
    LLM usage report. Finished episodes in the folder are skipped, failed ones redone."""
    from rescue_env.llm import UsageStats
    from rescue_env.llm.backend import client_from_config

    client = client_from_config(cfg.llm)
    journal = EpisodeJournal(out / "episodes.jsonl")
    done = {key for key, rec in journal.records.items() if not rec.failed}
    policies = dict(names)
    order: list[str] = []
    jobs: list[EpisodeJob] = []
    for scenario in scenarios:
        for name, policy in names:
            if policy and trained_scenario(policy) not in (None, scenario):
                log.info(f"note: {name} ({policy}) was trained for another scenario; not run on {scenario}")
                continue
            for d in (d for d in dialogues if d.scenario == scenario):
                for e in range(cfg.episodes):
                    job = EpisodeJob(scenario, name, d.sample_id, e)
                    order.append(job.key)
                    if job.key in done:
                        bar.update()
                    else:
                        jobs.append(job)

    backends: dict[str, Any] = {}
    # one env per episode in flight: built from the data path, they share one parse and text bank
    paths = resolve_data_paths(cfg.data.path)
    data_path: Any = str(paths[0]) if len(paths) == 1 else dialogues  # several files: the list loaded above

    def env_for(scenario: str) -> GroupSupportEnv:
        if cfg.dynamics.name != "llm":
            return make_env(cfg, scenario, data_path)
        if scenario not in backends:  # one backend per scenario: the personas' memories are per episode
            backends[scenario] = make_llm_backend(cfg, scenario, client=client)
        return make_env(cfg, scenario, data_path, backend=backends[scenario])

    prototypes: dict[tuple[str, str], Any] = {}

    def agent_for(scenario: str, name: str, env: GroupSupportEnv) -> Any:
        if name == "llm":
            return make_agent(
                "llm", scenario, encoding=env.encoding, client=client, window=cfg.agent.window, show_state=cfg.agent.show_state
            )
        if (scenario, name) not in prototypes:
            prototypes[scenario, name] = make_agent(
                name, scenario, encoding=env.encoding, seed=cfg.seed, imitation_data=imitation_data,
                policy=policies[name], deterministic=cfg.agent.deterministic, horizon=cfg.env.horizon,
            )
        # one agent per episode in flight (agents keep per-episode state); reset() reseeds it
        return copy.deepcopy(prototypes[scenario, name])

    per_agent = {name: UsageStats() for name, _ in names}

    def on_done(rec: EpisodeRecord) -> None:
        journal.append(rec)
        per_agent[rec.agent] = per_agent[rec.agent] + client.usage(rec.key)
        bar.update()

    async def play() -> list[EpisodeRecord]:
        try:
            return await arun_episodes(
                jobs, make_env=env_for, make_agent=agent_for, base_seed=cfg.seed,
                max_in_flight=2 * cfg.llm.max_concurrency, on_done=on_done,
            )
        finally:
            await client.aclose()

    # Everything alive now (imports, data, configs: a few hundred thousand objects) lives
    # through the run: freezing it keeps the collector's full passes from re-scanning it
    # while episodes are in flight (each such pass stalled the event loop for ~0.2 s, with
    # every request waiting). Only collection work changes, not what is collected later.
    gc.freeze()
    t0 = time.perf_counter()
    try:
        ran = asyncio.run(play())
    except KeyboardInterrupt:
        journal.close()
        print(f"\ninterrupted: finished episodes are in {journal.path}; run the same command again to resume", file=sys.stderr)
        raise
    finally:
        gc.unfreeze()
    wall = time.perf_counter() - t0
    journal.rewrite(order)
    journal.close()
    kept = journal.records
    for key in order:
        rec = kept[key]
        records[rec.agent].append(rec)
    usage = client.usage().to_dict()
    usage.update(
        model=cfg.llm.model,
        episodes_run=len(ran),
        episodes_failed=sum(r.failed for r in ran),
        episodes_skipped=len(order) - len(jobs),
        wall_s=wall,
        episodes_per_hour=len(ran) * 3600 / wall if ran and wall > 0 else None,
        therapist_fallbacks=sum(int(r.stats.get("therapist_fallbacks", 0)) for r in ran),
        failed_episodes={r.key: r.error for r in ran if r.failed},
        per_agent={name: stats.to_dict() for name, stats in per_agent.items()},
        **client_report(client),
    )
    return usage


def client_report(client: Any) -> dict[str, Any]:
    """What the client found out about the server: the structured-output mode (and how it was
    negotiated), the requests in flight it settled on, and the calls per role."""
    formats = client.formats.report()
    out: dict[str, Any] = {"structured_outputs_mode": formats["mode"], "structured_outputs": formats}
    out["per_role"] = {role: stats.to_dict() for role, stats in sorted(client.usage_by_role().items())}
    if client.concurrency is not None:
        concurrency = client.concurrency.report()
        out.update(concurrency=concurrency, concurrency_now=f"{concurrency['limit']} (lowest {concurrency['lowest_limit']}, max {concurrency['max_concurrency']})")
    return out


#: (key of the usage report, label, format) of the printed and HTML usage tables.
USAGE_COLUMNS = [
    ("model", "model", "{}"),
    ("structured_outputs_mode", "structured outputs", "{}"),
    ("concurrency_now", "requests in flight (adapted)", "{}"),
    ("episodes_run", "episodes run", "{:d}"),
    ("episodes_failed", "episodes failed", "{:d}"),
    ("episodes_skipped", "episodes already done", "{:d}"),
    ("episodes_per_hour", "episodes per hour", "{:.0f}"),
    ("calls", "LLM calls", "{:d}"),
    ("cache_hits", "cache hits", "{:d}"),
    ("retries", "retries (429, 5xx, timeouts)", "{:d}"),
    ("reasked", "re-asked (unusable JSON)", "{:d}"),
    ("repaired", "repaired JSON", "{:d}"),
    ("failures", "failed calls", "{:d}"),
    ("therapist_fallbacks", "therapist fallbacks to listening", "{:d}"),
    ("prompt_tokens", "prompt tokens", "{:d}"),
    ("completion_tokens", "completion tokens", "{:d}"),
    ("cost", "cost", "{:.4f}"),
    ("latency_p50_s", "latency p50 (s)", "{:.3f}"),
    ("latency_p90_s", "latency p90 (s)", "{:.3f}"),
    ("latency_p99_s", "latency p99 (s)", "{:.3f}"),
    ("wall_s", "wall time (s)", "{:.1f}"),
]


def usage_rows(usage: dict[str, Any]) -> list[list[str]]:
    """The usage report as (label, value) rows."""
    return [[label, "-" if usage.get(key) is None else fmt.format(usage[key])] for key, label, fmt in USAGE_COLUMNS]


#: (key of a role's usage, column header) of the per-role table.
ROLE_COLUMNS = [
    ("calls", "calls"),
    ("valid_first_try", "valid first try"),
    ("repaired", "repaired"),
    ("reasked", "re-asked"),
    ("failures", "failed"),
    ("trimmed", "transcript trimmed"),
    ("prompt_tokens", "prompt tokens"),
    ("completion_tokens", "reply tokens"),
]


def write_figures(out: Path, metrics: dict[str, Any], comparison: dict[str, Any]) -> None:
    """A run folder's ``metrics.json`` and ``summary.csv`` (one row per agent and scope),
    each written atomically."""
    atomic_write_text(out / "metrics.json", json.dumps(metrics, indent=1))
    headers, rows = csv_rows(comparison)
    with atomic_open(out / "summary.csv", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(headers)
        writer.writerows(rows)


def role_rows(usage: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """Headers and rows of the per-role table (one row per kind of call: client turn,
    therapist move, annotator...): what a model gets right and wrong, role by role."""
    headers = ["LLM role", *(label for _, label in ROLE_COLUMNS)]
    return headers, [[role, *(stats.get(key, 0) for key, _ in ROLE_COLUMNS)] for role, stats in usage.get("per_role", {}).items()]


def usage_html(usage: dict[str, Any]) -> str:
    """The usage report as an HTML table, with the per-role table and the failed episodes' reasons."""
    rows = "".join(f"<tr><td>{html.escape(a)}</td><td>{html.escape(b)}</td></tr>" for a, b in usage_rows(usage))
    parts = [f"<table>{rows}</table>"]
    headers, by_role = role_rows(usage)
    if by_role:
        head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in by_role)
        parts.append(f"<table><tr>{head}</tr>{body}</table>")
    if usage.get("failed_episodes"):
        items = "".join(f"<li><code>{html.escape(k)}</code>: {html.escape(v)}</li>" for k, v in usage["failed_episodes"].items())
        parts.append(f"<p>Failed episodes (a rerun in this folder tries them again):</p><ul>{items}</ul>")
    return "\n".join(parts)


@hydra.main(version_base="1.3", config_path="pkg://conf", config_name="rollout")
@user_errors
def main(cfg: DictConfig) -> None:
    # torch (pulled by SB3 agents) would otherwise take every core for tiny policy nets
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # one INFO line per HTTP request would bury the run's log
    for noisy in ("httpx", "httpx2", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    metrics = run(cfg, run_dir())
    failed = sum(int(s.get("failed", 0)) for s in metrics["agents"].values())
    if failed:
        total = sum(int(s.get("episodes", 0)) for s in metrics["agents"].values())
        reasons = sorted({str(e).split(" (after")[0] for e in (metrics.get("llm") or {}).get("failed_episodes", {}).values()})
        print(
            f"{failed} of {total} episodes failed" + (f": {'; '.join(reasons[:3])}" if reasons else "")
            + ". Everything else is written; run the same command again to retry them.",
            file=sys.stderr,
        )
        record_outcome(EXIT_SOME_FAILED)


if __name__ == "__main__":
    main()
