"""``rescue rollout``: the main job — closed-loop episodes of therapist agents on the seed
dialogues, with a summary table, metrics files, plots and a one-page HTML report.

Run folder (``hydra.run.dir``): ``episodes.jsonl`` (benchmark schema + per-row state, one
episode per line, appended as episodes finish; a rerun with the same folder skips finished
episodes), ``metrics.json``, ``summary.csv``, ``plots/``, ``report.html``.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from tabulate import tabulate
from tqdm import tqdm

from agents import make_agent
from experiments.common import load_data, run_dir
from experiments.config import register_configs
from rescue_env.data import load_dialogues
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.report import summary_rows, write_report
from rescue_env.rollout import EpisodeRecord, record_from_json, run_episode, summarise

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
    """Episodes already in ``episodes.jsonl`` (a torn last line from a crash is ignored)."""
    done: dict[str, EpisodeRecord] = {}
    if not path.exists():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        rec = record_from_json(obj)
        done[rec.key] = rec
    return done


def make_env(cfg: DictConfig, scenario: str, dialogues: list) -> GroupSupportEnv:
    dynamics: Any = cfg.dynamics.name
    if dynamics == "llm":
        from rescue_env.llm.backend import make_llm_backend  # the LLM layer (issue 5)

        dynamics = make_llm_backend(cfg, scenario)
    return GroupSupportEnv(
        scenario,
        dynamics=dynamics,
        params=cfg.dynamics.params,
        data_path=dialogues,
        horizon=cfg.env.horizon,
        reward=OmegaConf.to_container(cfg.reward),  # type: ignore[arg-type]
        max_members=cfg.env.max_members,
        min_prefix=cfg.env.min_prefix,
        settle_threshold=cfg.env.settle_threshold,
        settle_steps=cfg.env.settle_steps,
        terminate_on_settle=cfg.env.terminate_on_settle,
        record_transcript=True,
    )


def run(cfg: DictConfig, out: Path) -> dict[str, Any]:
    """The rollout job (callable without Hydra's CLI for tests)."""
    t0 = time.perf_counter()
    dialogues, source = load_data(cfg.data.path, cfg.data.strict)
    imitation_data = load_dialogues(cfg.imitation_data) if cfg.imitation_data else dialogues
    if cfg.episodes < 1:
        raise ValueError(f"episodes must be at least 1, got {cfg.episodes}")
    scenarios = [s for s in ("couple", "family") if any(d.scenario == s for d in dialogues)]
    names = agent_names(cfg)
    out.mkdir(parents=True, exist_ok=True)
    episodes_path = out / "episodes.jsonl"
    finished = load_finished(episodes_path)
    records: dict[str, list[EpisodeRecord]] = {name: [] for name, _ in names}
    total = len(names) * cfg.episodes * len(dialogues)
    bar = tqdm(total=total, desc="episodes", unit="ep", disable=not cfg.progress)
    with episodes_path.open("a", encoding="utf-8") as sink:
        for scenario in scenarios:
            env = make_env(cfg, scenario, dialogues)
            for name, policy in names:
                agent = make_agent(
                    name, scenario, encoding=env.encoding, seed=cfg.seed, imitation_data=imitation_data,
                    policy=policy, deterministic=cfg.agent.deterministic, horizon=cfg.env.horizon,
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
    summary = {name: summarise(recs) for name, recs in records.items()}
    headers, rows = summary_rows(summary)
    print(tabulate(rows, headers=headers))
    elapsed = time.perf_counter() - t0
    metrics = {"source": source, "episodes_per_seed": cfg.episodes, "seed": cfg.seed, "elapsed_s": elapsed, "agents": summary}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=1), encoding="utf-8")
    with (out / "summary.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(headers)
        writer.writerows(rows)
    if cfg.report:
        report = write_report(out, summary, records, config_text=OmegaConf.to_yaml(cfg), snapshots=cfg.snapshots)
        print(f"report: {report}")
    print(f"run folder: {out}  ({elapsed:.1f} s)")
    return metrics


@hydra.main(version_base="1.3", config_path="pkg://conf", config_name="rollout")
def main(cfg: DictConfig) -> None:
    # torch (pulled by SB3 agents) would otherwise take every core for tiny policy nets
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    run(cfg, run_dir())


if __name__ == "__main__":
    main()
