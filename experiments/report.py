"""``rescue report RUN_DIR``: re-render ``report.html`` and ``plots/`` of a rollout run folder
from its ``episodes.jsonl`` (e.g. after an upgrade of the report, or for a run made with
``report=false``), keeping a judge section that ``rescue judge`` put there.

``rescue merge OUT SHARD_DIR...``: join the run folders of a sharded rollout (``shard=i/n``
jobs) into one run folder ``OUT``: ``episodes.jsonl`` (each episode once, in canonical
order), ``metrics.json`` (the comparison over all shards; each shard's own metrics under
``shards``), ``summary.csv`` and ``report.html``.

Reads ``episodes.jsonl`` (every agent's episodes), ``metrics.json`` (the reference agent of
the paired differences and the LLM usage, when present) and ``.hydra/config.yaml`` (shown in
the report; ``snapshots``). ``--compare-to AGENT`` changes the reference agent.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from rescue_env.atomic import atomic_open, atomic_write_text
from rescue_env.comparison import compare
from rescue_env.report import write_report
from rescue_env.rollout import EpisodeRecord, record_from_json


def load_records(run_dir: Path) -> dict[str, list[EpisodeRecord]]:
    """The run's episodes by agent, in file order."""
    path = run_dir / "episodes.jsonl"
    if not path.is_file() and (run_dir / "model.zip").is_file():  # a `rescue train` folder
        raise FileNotFoundError(
            f"{run_dir} is a `rescue train` run folder (a policy, no episodes to report): play the policy with "
            f"`rescue rollout policy={run_dir / 'model.zip'}` (add data.path=... for the dialogues it was trained on); "
            "that run folder gets the report"
        )
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: not a `rescue rollout` run folder")
    records: dict[str, list[EpisodeRecord]] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = record_from_json(json.loads(line))
        except (json.JSONDecodeError, KeyError, ValueError) as exc:
            raise ValueError(f"{path}:{n}: not an episode line ({exc})") from exc
        records.setdefault(rec.agent, []).append(rec)
    if not records:
        raise ValueError(f"{path} holds no episode")
    return records


def rebuild_report(run_dir: str | Path, compare_to: str | None = None) -> Path:
    """Write ``report.html`` and ``plots/`` of ``run_dir`` again; returns the report path."""
    from rescue_env.judges.report import BEGIN, END, insert_into_report

    run_dir = Path(run_dir)
    records = load_records(run_dir)
    metrics_path = run_dir / "metrics.json"
    metrics = json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path.is_file() else {}
    config_path = run_dir / ".hydra" / "config.yaml"
    config_text = config_path.read_text(encoding="utf-8") if config_path.is_file() else ""
    snapshots = 3
    if config_text:
        import yaml

        snapshots = int((yaml.safe_load(config_text) or {}).get("snapshots", 3))
    reference = compare_to if compare_to is not None else metrics.get("compare_to", "heuristic")
    comparison = compare(records, reference)
    sections = []
    if metrics.get("llm"):
        from experiments.rollout import usage_html

        sections.append(("LLM usage", usage_html(metrics["llm"])))
    old = run_dir / "report.html"
    judge = None
    if old.is_file():
        found = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), old.read_text(encoding="utf-8"), flags=re.S)
        judge = found.group(0) if found else None
    path = write_report(run_dir, comparison, records, config_text=config_text, snapshots=snapshots, extra_sections=sections)
    if judge:
        insert_into_report(path, judge)
    return path


def merge_runs(out: str | Path, shards: list[str | Path], compare_to: str | None = None) -> dict:
    """Join the shard run folders into ``out``; returns the merged ``metrics.json``. A key
    present in two shards is an error unless both lines are equal (the same episode)."""
    from experiments.rollout import write_figures

    out = Path(out)
    lines: dict[str, str] = {}
    for shard in shards:
        path = Path(shard) / "episodes.jsonl"
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: not a `rescue rollout` run folder")
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            obj = json.loads(line)
            key = f"rollout/{obj['agent']}/{obj['seed_sample_id']}/ep{obj['episode']}"
            if key in lines and lines[key] != line:
                raise ValueError(f"{key} differs between shards: were they run with different settings?")
            lines[key] = line
    out.mkdir(parents=True, exist_ok=True)
    order = sorted(lines, key=lambda k: (json.loads(lines[k])["agent"], k))
    atomic_write_text(out / "episodes.jsonl", "".join(lines[k] + "\n" for k in order))
    records = load_records(out)
    metrics_of = [json.loads((Path(s) / "metrics.json").read_text(encoding="utf-8")) if (Path(s) / "metrics.json").is_file() else {} for s in shards]
    reference = compare_to if compare_to is not None else next((m.get("compare_to") for m in metrics_of if m.get("compare_to")), "heuristic")
    comparison = compare(records, reference)
    metrics = {"merged_from": [str(s) for s in shards], **comparison, "shards": metrics_of}
    write_figures(out, metrics, comparison)
    config = Path(shards[0]) / ".hydra" / "config.yaml"
    write_report(out, comparison, records, config_text=config.read_text(encoding="utf-8") if config.is_file() else "")
    return metrics


def merge_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rescue merge", description="Join the run folders of a sharded rollout (shard=i/n).")
    parser.add_argument("out", help="the merged run folder to write")
    parser.add_argument("shards", nargs="+", help="the shards' run folders")
    parser.add_argument("--compare-to", default=None, help="reference agent of the paired Δ (default: the shards')")
    args = parser.parse_args(argv)
    try:
        metrics = merge_runs(args.out, args.shards, args.compare_to)
    except (FileNotFoundError, ValueError) as exc:
        print(f"rescue merge: {exc}", file=sys.stderr)
        return 1
    from experiments.rollout import console_table
    from rescue_env.report import console_rows

    print(console_table(*console_rows(metrics)))
    print(f"merged {len(args.shards)} shard(s) into {args.out} (report.html, summary.csv, metrics.json)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rescue report", description="Re-render report.html of a rollout run folder.")
    parser.add_argument("run_dir", help="a `rescue rollout` run folder (with episodes.jsonl)")
    parser.add_argument("--compare-to", default=None, help="reference agent of the paired Δ (default: the run's)")
    args = parser.parse_args(argv)
    try:
        path = rebuild_report(args.run_dir, args.compare_to)
    except (FileNotFoundError, ValueError) as exc:
        print(f"rescue report: {exc}", file=sys.stderr)
        return 1
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
