"""``rescue rollout``: the main job — closed-loop episodes of therapist agents on the seed
dialogues, with a summary table, metrics files, plots and a one-page HTML report.

Run folder (``hydra.run.dir``): ``episodes.jsonl.gz`` (benchmark schema + per-row state, one
episode per line, gzip JSON Lines appended one member per episode as episodes finish;
``compress=false``: plain ``episodes.jsonl``; a rerun with the same folder skips finished
episodes and continues the file the folder holds, see :func:`rescue_env.rollout.episodes_file`), ``run_config.json`` (the settings that define them: a rerun with others is
refused, see :mod:`rescue_env.experiments.run_record`), ``metrics.json``, ``summary.csv``, ``plots/``,
``report.html``. Exit code 3 when some episodes failed (:mod:`rescue_env.experiments.errors`).

The episodes are played by :func:`rescue_env.rollout.run_episodes` over the folder's
:class:`~rescue_env.rollout.EpisodeJournal`: calibrated runs one episode at a time, LLM runs
(``dynamics=llm`` and/or an ``llm`` agent) at most ``2 × llm.max_concurrency`` in flight over
one LLM client, requests bounded by ``llm.max_concurrency``. An episode whose calls fail for
good is recorded as failed with its reason (a rerun in the same folder tries it again) while
the others go on; at the end the episodes file is rewritten in the canonical order
(scenario, agent, seed dialogue, episode), so interrupted-and-resumed, concurrent and
replayed runs give the same file. The summary, ``metrics.json`` (``llm``) and
``report.html`` of LLM runs add the LLM usage: calls, tokens, cache hits, retries,
failures, latency percentiles, episodes per hour.
"""

from __future__ import annotations

import copy
import csv
import functools
import html
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from tabulate import tabulate
from tqdm import tqdm

from rescue_env.agents import make_agent
from rescue_env.agents.registry import LEARNED_AGENTS
from rescue_env.experiments.common import load_playable, run_dir
from rescue_env.experiments.config import env_config, make_llm_backend, register_configs, reward_config
from rescue_env.experiments.errors import EXIT_SOME_FAILED, UserError, record_outcome, user_errors
from rescue_env.atomic import atomic_open, atomic_write_text
from rescue_env.data import load_dialogues, resolve_data_paths
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.comparison import compare
from rescue_env.jsonl import dumps, finite_or_null
from rescue_env.report import console_rows, csv_rows, write_report
from rescue_env.llm import UsageStats
from rescue_env.llm.backend import client_from_config
from rescue_env.rollout import EpisodeJob, EpisodeJournal, EpisodeRecord, RunOutcome, episodes_file, run_episodes

log = logging.getLogger(__name__)
register_configs()


def agent_names(cfg: DictConfig) -> list[tuple[str, str | None]]:
    """(agent name, policy file) pairs to run."""
    if cfg.agent.name:
        return [(cfg.agent.name, cfg.agent.policy)]
    # a learned agent named in ``agents`` plays the policy file given (policy= or agent.policy=)
    given = cfg.policy or cfg.agent.policy
    names = [(str(a), given if str(a) in LEARNED_AGENTS else None) for a in cfg.agents]
    if cfg.policy and not any(a in LEARNED_AGENTS for a, _ in names):
        names.append(("policy", cfg.policy))  # the learned agent's one name (as in rescue train)
    return names


def trained_scenario(policy: str) -> str | None:
    """The scenario a saved policy acts in (read once per file version, not per scenario)."""
    path = Path(policy)
    return _trained_scenario(str(path.resolve()), path.stat().st_mtime_ns if path.exists() else 0)


@functools.lru_cache(maxsize=16)
def _trained_scenario(path: str, mtime_ns: int) -> str | None:
    # imported here: torch (through SB3) takes seconds to import, and only runs with a
    # learned policy need it
    from rescue_env.agents.sb3 import load_policy, policy_scenario

    return policy_scenario(load_policy(path))


def run(cfg: DictConfig, out: Path) -> dict[str, Any]:
    """The rollout job (callable without Hydra's CLI for tests). ``env.scenario`` chooses the
    seed dialogues: ``all`` (the default) every scenario in the data, else that one."""
    t0 = time.perf_counter()
    client = client_from_config(cfg.llm) if uses_llm(cfg) else None
    if client is not None:
        client.start_server()  # llm=local: the server loads while the data, envs and agents are built
    # every group played must fit its env (env.max_members): an error naming the sample, never a
    # cut; another scenario's groups (env=couple on data with families) are not played
    played = None if cfg.env.scenario == "all" else cfg.env.scenario
    dialogues, source = load_playable(cfg.data.path, cfg.data.strict, cfg.env.max_members, played)
    # the imitation prior is fitted on every member of every group: no size limit there
    imitation_data = load_dialogues(cfg.imitation_data) if cfg.imitation_data else dialogues
    scenarios = select_scenarios(cfg.env.scenario, dialogues, source)
    seeds = shard_of([d for d in dialogues if d.scenario in scenarios], cfg.shard)
    out.mkdir(parents=True, exist_ok=True)
    outcome, usage = play(cfg, out, episode_jobs(cfg, seeds, scenarios), dialogues, imitation_data, client)
    records: dict[str, list[EpisodeRecord]] = {name: [] for name, _ in agent_names(cfg)}
    for rec in outcome.records:
        records[rec.agent].append(rec)
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


def episode_jobs(cfg: DictConfig, seeds: list, scenarios: list[str]) -> list[EpisodeJob]:
    """The run's episodes in their canonical order (scenario, agent, seed dialogue, episode):
    ``cfg.episodes`` per seed dialogue for every agent; a trained policy plays only the
    scenario it was trained on."""
    jobs = []
    for scenario in scenarios:
        for name, policy in agent_names(cfg):
            if policy and trained_scenario(policy) not in (None, scenario):
                log.info(f"note: {name} ({policy}) was trained for another scenario; not run on {scenario}")
                continue
            jobs += [EpisodeJob(scenario, name, d.sample_id, e) for d in seeds if d.scenario == scenario for e in range(cfg.episodes)]
    return jobs


def play(
    cfg: DictConfig, out: Path, jobs: list[EpisodeJob], dialogues: list, imitation_data: list, client: Any = None
) -> tuple[RunOutcome, dict[str, Any] | None]:
    """Play ``jobs`` into the episodes file of ``out`` (skipping the episodes finished there) and
    return the outcome with the LLM usage report (None for a run without LLM calls). LLM runs
    keep ``2 × llm.max_concurrency`` episodes in flight over one client; others play one
    episode at a time. ``client``: the run's LLM client (None: a run without LLM calls)."""
    per_agent = {name: UsageStats() for name, _ in agent_names(cfg)}
    path = episodes_file(out, compress=cfg.compress)
    if path.is_file() and path.name.endswith(".gz") != bool(cfg.compress):
        # a rerun keeps the folder's file as it is: one run's episodes stay in one file
        log.warning("%s already holds %s: the new episodes go there too (compress=%s applies to new run folders)", out, path.name, str(cfg.compress).lower())
    make_env, make_agent = env_factory(cfg, dialogues, client), agent_factory(cfg, imitation_data, client)
    for scenario, name in dict.fromkeys((job.scenario, job.agent) for job in jobs):
        # built before the episodes file is opened: an agent that cannot serve one of the run's
        # scenarios (a prior fitted on couples only, a policy of another layout) stops the run
        # before anything is played or written
        make_agent(scenario, name, make_env(scenario))
    with EpisodeJournal(path) as journal:
        done = journal.done
        bar = tqdm(total=len(jobs), initial=sum(job.key in done for job in jobs), desc="episodes", unit="ep", disable=not cfg.progress)

        def on_done(rec: EpisodeRecord) -> None:
            if client is not None:
                per_agent[rec.agent] = per_agent[rec.agent] + client.usage(rec.key)
            bar.update()

        try:
            outcome = run_episodes(
                jobs, journal, make_env=make_env, make_agent=make_agent,
                base_seed=cfg.seed, max_in_flight=1 if client is None else 2 * cfg.llm.max_concurrency,
                on_done=on_done, closing=() if client is None else (client,),
            )
        except KeyboardInterrupt:
            print(f"\ninterrupted: finished episodes are in {journal.path}; run the same command again to resume", file=sys.stderr)
            raise
        finally:
            bar.close()
    return outcome, None if client is None else llm_usage(cfg, client, outcome, per_agent)


def env_factory(cfg: DictConfig, dialogues: list, client: Any) -> Callable[[str], GroupSupportEnv]:
    """``make_env(scenario)``: the rollout env of a scenario. Envs built from one data path
    share its parse and text bank; LLM clients (``dynamics=llm``) get one backend per
    scenario over the run's ``client``."""
    paths = resolve_data_paths(cfg.data.path)
    data: Any = str(paths[0]) if len(paths) == 1 else dialogues  # several files: the list loaded already
    backends: dict[str, Any] = {}

    def make_env(scenario: str) -> GroupSupportEnv:
        dynamics: Any = cfg.dynamics.name
        if dynamics == "llm":
            if scenario not in backends:  # the personas' memories are per episode
                backends[scenario] = make_llm_backend(cfg, scenario, client=client)
            dynamics = backends[scenario]
        return GroupSupportEnv(
            config=env_config(cfg, scenario=scenario, record_transcript=True), dynamics=dynamics, params=cfg.dynamics.params,
            heterogeneity=cfg.dynamics.heterogeneity, data_path=data, reward=reward_config(cfg),
        )

    return make_env


def agent_factory(cfg: DictConfig, imitation_data: list, client: Any) -> Callable[[str, str, GroupSupportEnv], Any]:
    """``make_agent(scenario, name, env)``: a fresh agent for the runner's pool. The LLM
    therapist talks through the run's ``client``; the others are copies of one agent per
    (scenario, name), built once (the imitation prior is fitted once)."""
    policies = dict(agent_names(cfg))
    prototypes: dict[tuple[str, str], Any] = {}

    def agent_for(scenario: str, name: str, env: GroupSupportEnv) -> Any:
        if name == "llm":
            return make_agent("llm", scenario, encoding=env.encoding, client=client, window=cfg.agent.window, show_state=cfg.agent.show_state)
        if (scenario, name) not in prototypes:
            prototypes[scenario, name] = make_agent(
                name, scenario, encoding=env.encoding, seed=cfg.seed, policy=policies[name], prior=cfg.agent.prior,
                # the behaviour prior fits on agent.fit_data where given, else on the run's data
                imitation_data=None if cfg.agent.fit_data else imitation_data, fit_data=cfg.agent.fit_data,
                deterministic=cfg.agent.deterministic, horizon=cfg.env.horizon,
            )
        return copy.deepcopy(prototypes[scenario, name])

    return agent_for


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
    from rescue_env.experiments import STARTED

    job = time.perf_counter() - t_run
    total = time.perf_counter() - STARTED
    return f"{total:.1f} s since the command started, {job:.1f} s in this job" if total > job + 0.05 else f"{job:.1f} s"


def uses_llm(cfg: DictConfig) -> bool:
    """LLM clients or an LLM therapist: the run makes LLM calls and reports their usage."""
    return cfg.dynamics.name == "llm" or any(name == "llm" for name, _ in agent_names(cfg))


def llm_usage(cfg: DictConfig, client: Any, outcome: RunOutcome, per_agent: dict[str, Any]) -> dict[str, Any]:
    """The LLM usage report of a run: the client's counts, the episodes run, failed and
    skipped, the throughput, each agent's share and what the client found out about the server."""
    ran, wall = outcome.ran, outcome.wall_s
    usage = client.usage().to_dict()
    usage.update(
        model=cfg.llm.model,
        episodes_run=len(ran),
        episodes_failed=sum(r.failed for r in ran),
        episodes_skipped=outcome.skipped,
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
    ("evaluated_prompt_tokens", "prompt tokens evaluated (not found cached)", "{:d}"),
    ("evaluated_prompt_share", "evaluated share of prompt tokens", "{:.0%}"),
    ("prompt_eval_tokens_per_s", "server prompt evaluation (tokens/s)", "{:.1f}"),
    ("generation_tokens_per_s", "server generation (tokens/s)", "{:.1f}"),
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
    ("evaluated_prompt_tokens", "evaluated prompt tokens"),
    ("prompt_s", "prompt s"),
    ("completion_tokens", "reply tokens"),
    ("completion_s", "reply s"),
]


def write_figures(out: Path, metrics: dict[str, Any], comparison: dict[str, Any]) -> None:
    """A run folder's ``metrics.json`` and ``summary.csv`` (one row per agent and scope),
    each written atomically."""
    atomic_write_text(out / "metrics.json", dumps(finite_or_null(metrics), indent=1))  # undefined figures: null
    headers, rows = csv_rows(comparison)
    with atomic_open(out / "summary.csv", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(headers)
        writer.writerows(rows)


def role_rows(usage: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """Headers and rows of the per-role table (one row per kind of call: client turn,
    therapist move, annotator...): what a model gets right and wrong, role by role."""
    headers = ["LLM role", *(label for _, label in ROLE_COLUMNS)]
    return headers, [[role, *(_role_cell(stats.get(key, 0)) for key, _ in ROLE_COLUMNS)] for role, stats in usage.get("per_role", {}).items()]


def _role_cell(value: Any) -> Any:
    """A per-role figure as shown: seconds to 0.1, a figure the server did not report as '-'."""
    return "-" if value is None else round(value, 1) if isinstance(value, float) else value


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


@hydra.main(version_base="1.3", config_path="pkg://rescue_env.conf", config_name="rollout")
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
