"""``rescue report RUN_DIR``: re-render ``report.html`` and ``plots/`` of a rollout run folder
from its ``episodes.jsonl`` (e.g. after an upgrade of the report, or for a run made with
``report=false``), keeping a judge section that ``rescue judge`` put there.

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

from rescue_env.comparison import compare
from rescue_env.report import write_report
from rescue_env.rollout import EpisodeRecord, record_from_json


def load_records(run_dir: Path) -> dict[str, list[EpisodeRecord]]:
    """The run's episodes by agent, in file order."""
    path = run_dir / "episodes.jsonl"
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
