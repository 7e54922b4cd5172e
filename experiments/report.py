"""``rescue report RUN_DIR``: re-render ``report.html`` and ``plots/`` of a rollout run folder
from its episodes file (e.g. after an upgrade of the report, or for a run made with
``report=false``), keeping a judge section that ``rescue judge`` put there.

``rescue merge OUT SHARD_DIR...``: join the run folders of a sharded rollout (``shard=i/n``
jobs) into one new run folder ``OUT``: ``episodes.jsonl.gz`` (each episode once, in canonical
order; ``--plain``: ``episodes.jsonl``; shards of either form are merged), ``metrics.json`` (the comparison over all shards; each shard's own metrics under
``shards``; what the merge found under ``merge``), ``summary.csv`` and ``report.html``.

What ``merge`` refuses (exit 2, nothing written):

- an ``OUT`` that is one of the shards, or any folder that is not empty, unless it is the
  output of an earlier merge and ``--overwrite`` is given (``rescue merge s0 s1``, with OUT
  forgotten, would otherwise write over run ``s0``);
- shards run with different settings: their ``run_config.json`` (everything that defines an
  episode: data, env, dynamics, reward, agent, seed…) must be equal, and so must the extent
  in ``.hydra/config.yaml`` (``episodes``, ``agents``, ``agent.name``) and the shard count
  ``n`` of ``shard=i/n``. What legitimately differs between shards is not compared: the
  shard index ``i``, the run folder, and the presentation and resource settings that
  ``run_config.json`` leaves out (``progress``, ``report``, ``llm.max_concurrency``…);
- one episode written differently by two shards.

What it warns about, counts under ``metrics.json["merge"]`` and answers with exit 3 (the
merge is written, but incomplete): a missing shard index (``0/2`` without ``1/2``), a
partial shard (fewer episodes than its config plans: a killed job), failed episodes.

Reads the episodes file (``episodes.jsonl.gz`` or ``episodes.jsonl``, whichever the folder
holds: :func:`rescue_env.rollout.episodes_file`; every agent's episodes), ``metrics.json`` (the reference agent of
the paired differences and the LLM usage, when present) and ``.hydra/config.yaml`` (shown in
the report; ``snapshots``). ``--compare-to AGENT`` changes the reference agent; it must be an
agent of the run. Every user error exits 2 (:mod:`rescue_env.experiments.errors`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rescue_env.experiments.errors import EXIT_OK, EXIT_SOME_FAILED, EXIT_USER_ERROR, USER_ERRORS, UserError, report_error
from rescue_env.atomic import atomic_open
from rescue_env.comparison import DEFAULT_REFERENCE, check_reference, compare
from rescue_env.jsonl import JsonlError, encode_lines, read_objects, read_records
from rescue_env.report import write_report
from rescue_env.rollout import EPISODES_FILES, EpisodeRecord, episodes_file, record_from_json, record_key

#: The keys of a shard's ``.hydra/config.yaml`` that must match across shards besides its
#: ``run_config.json``: the extent of the run (a shard with other agents or more episodes
#: per dialogue would weigh the pooled figures unevenly).
EXTENT_KEYS = ("episodes", "agents", "agent.name")


def episodes_path(run_dir: Path) -> Path:
    """The run folder's episodes file (:func:`episodes_file`); a :class:`UserError` when the
    folder is not a run folder (``RunFolderError``, also a user error, when it holds both forms)."""
    path = episodes_file(run_dir)
    if not path.is_file() and (run_dir / "model.zip").is_file():  # a `rescue train` folder
        raise UserError(
            f"{run_dir} is a `rescue train` run folder (a policy, no episodes to report): play the policy with "
            f"`rescue rollout policy={run_dir / 'model.zip'}` (add data.path=... for the dialogues it was trained on); "
            "that run folder gets the report"
        )
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} is not a folder (give a `rescue rollout` run folder)" if run_dir.exists() else f"{run_dir} does not exist")
    if not path.is_file():
        raise UserError(f"{run_dir} holds no episodes file ({' or '.join(EPISODES_FILES)}): it is not a `rescue rollout` run folder")
    return path


def load_records(run_dir: Path) -> dict[str, list[EpisodeRecord]]:
    """The run's episodes by agent, in file order (a bad line: :class:`UserError` naming it)."""
    path = episodes_path(run_dir)
    records: dict[str, list[EpisodeRecord]] = {}
    try:
        for n, obj in read_objects(path):
            try:
                rec = record_from_json(obj)
            except (KeyError, ValueError, TypeError, AttributeError) as exc:
                raise UserError(f"{path}:{n}: not an episode line ({exc})") from None
            records.setdefault(rec.agent, []).append(rec)
    except JsonlError as exc:
        raise UserError(f"{exc}: not an episode line") from None
    if not records:
        raise UserError(f"{path} holds no episode")
    return records


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise UserError(f"{path} cannot be read ({exc})") from None
    return data if isinstance(data, dict) else {}


def reference_of(records: dict[str, list[EpisodeRecord]], compare_to: str | None, recorded: dict[str, Any]) -> str | None:
    """The reference agent: ``compare_to`` when given (it must be an agent of the run: a
    :class:`UserError` listing them otherwise), else the one ``recorded`` (a metrics.json)."""
    if compare_to is not None:
        try:
            check_reference(compare_to, list(records))
        except ValueError as exc:
            raise UserError(f"--compare-to {compare_to}: {exc}") from None
        return compare_to
    return recorded.get("compare_to", DEFAULT_REFERENCE) if recorded else DEFAULT_REFERENCE


def rebuild_report(run_dir: str | Path, compare_to: str | None = None) -> Path:
    """Write ``report.html`` and ``plots/`` of ``run_dir`` again; returns the report path."""
    from rescue_env.judges.report import BEGIN, END, insert_into_report

    run_dir = Path(run_dir)
    records = load_records(run_dir)
    metrics = _read_json(run_dir / "metrics.json")
    config_path = run_dir / ".hydra" / "config.yaml"
    config_text = config_path.read_text(encoding="utf-8") if config_path.is_file() else ""
    snapshots = 3
    if config_text:
        import yaml

        snapshots = int((yaml.safe_load(config_text) or {}).get("snapshots", 3))
    comparison = compare(records, reference_of(records, compare_to, metrics))
    sections = []
    if metrics.get("llm"):
        from rescue_env.experiments.rollout import usage_html

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


# ---------------------------------------------------------------------------------------------
# merge


@dataclass
class Shard:
    """One shard's run folder as the merge reads it."""

    path: Path
    #: episode key -> its line, as written by the shard
    lines: dict[str, str] = field(default_factory=dict)
    failed: int = 0
    #: ``run_config.json`` (None: the folder has none) and ``.hydra/config.yaml``
    record: dict[str, Any] | None = None
    config: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def index(self) -> tuple[int, int] | None:
        """``(i, n)`` of ``shard=i/n``; None for an unsharded run or an unreadable value."""
        try:
            i, n = (int(x) for x in str(self.config.get("shard")).split("/"))
        except ValueError:
            return None
        return i, n

    @property
    def name(self) -> str:
        return f"{self.path} (shard {self.config.get('shard')})" if self.config.get("shard") else str(self.path)


def read_shard(folder: str | Path) -> Shard:
    """The episodes, settings and metrics of one shard folder (:class:`UserError` when it is
    not a rollout run folder or a line is not an episode)."""
    import yaml

    path = Path(folder)
    shard = Shard(path)
    source = episodes_path(path)
    try:
        for n, line, obj in read_records(source):
            try:
                key = record_key(obj["agent"], obj["seed_sample_id"], obj["episode"])
            except (KeyError, TypeError):
                raise UserError(f"{source}:{n}: not an episode line (no agent, seed_sample_id or episode)") from None
            shard.lines[key] = line  # a key seen twice in one file: its last line (as on resume)
            shard.failed += bool(obj.get("failed"))
    except JsonlError as exc:
        raise UserError(f"{exc}: not an episode line") from None
    if (path / "run_config.json").is_file():
        shard.record = _read_json(path / "run_config.json")
    config = path / ".hydra" / "config.yaml"
    if config.is_file():
        shard.config = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    shard.metrics = _read_json(path / "metrics.json")
    return shard


def out_problem(out: Path, shards: list[Path], overwrite: bool) -> str | None:
    """Why ``OUT`` must not be written (None when it may)."""
    usage = "usage: rescue merge OUT SHARD_DIR... (OUT, the new merged folder, comes first)"
    if out.exists() and not out.is_dir():
        return f"OUT {out} is a file; give a new folder for the merged run. {usage}"
    if any(out.resolve() == s.resolve() for s in shards if s.exists()):
        return f"OUT {out} is also one of the shards; give a new folder for the merged run. {usage}"
    if not out.is_dir() or not any(out.iterdir()):
        return None
    held = [name for name in EPISODES_FILES if (out / name).is_file()]
    if held and not _read_json(out / "metrics.json").get("merged_from"):
        return (
            f"OUT {out} is a run folder (it holds {held[0]}), not a new folder: was OUT forgotten? "
            f"Nothing was written. {usage}"
        )
    if _read_json(out / "metrics.json").get("merged_from"):
        if overwrite:
            return None
        return f"OUT {out} holds an earlier merge; give a new folder, or pass --overwrite to replace that merge"
    return f"OUT {out} is a folder that is not empty; give a new folder for the merged run. {usage}"


def _dotted(tree: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        tree = tree.get(part) if isinstance(tree, dict) else None  # type: ignore[assignment]
    return tree


def settings_problem(shards: list[Shard]) -> str | None:
    """Why the shards' episodes must not be pooled: the settings that differ between them,
    each with its value per shard (None when they agree)."""
    from rescue_env.experiments.run_record import differences

    first = shards[0]
    found: dict[str, list[str]] = {}

    def note(key: str, values: list[tuple[Shard, Any]]) -> None:
        found[key] = [f"{s.path.name or s.path}: {json.dumps(v, default=str)}" for s, v in values]

    for other in shards[1:]:
        if first.record is not None and other.record is not None:
            for key in differences(first.record, other.record):
                note(key, [(s, _dotted(s.record or {}, key)) for s in shards])
        for key in EXTENT_KEYS:
            if _dotted(first.config, key) != _dotted(other.config, key):
                note(key, [(s, _dotted(s.config, key)) for s in shards])
    counts = {s.index[1] for s in shards if s.index is not None}
    if len(counts) > 1:
        note("shard", [(s, s.config.get("shard")) for s in shards])
    if not found:
        return None
    listed = "; ".join(f"{key} ({', '.join(values)})" for key, values in found.items())
    return (
        f"the shards were run with different settings, so their episodes cannot be pooled: {listed}. "
        "Rerun the odd shard with the others' settings, or merge only the shards that match"
    )


def planned_keys(shard: Shard) -> set[str] | None:
    """The episode keys the shard's config plans (agents × its seed dialogues × episodes);
    None when that cannot be worked out (no config, the data moved)."""
    from omegaconf import OmegaConf

    from rescue_env.data import describe_data_path, load_dialogues
    from rescue_env.experiments.rollout import episode_jobs, select_scenarios, shard_of

    if not shard.config:
        return None
    try:
        cfg = OmegaConf.create(shard.config)
        data = (shard.record or {}).get("data", {}).get("path", cfg.data.path)  # run_config's is absolute
        dialogues = load_dialogues(data, strict=bool(cfg.data.strict))
        scenarios = select_scenarios(cfg.env.scenario, dialogues, describe_data_path(data))
        played = shard_of([d for d in dialogues if d.scenario in scenarios], cfg.shard)
        return {job.key for job in episode_jobs(cfg, played, scenarios)}
    except Exception:  # noqa: BLE001 (any failure: the check falls back to metrics.json)
        return None


def completeness(shards: list[Shard]) -> tuple[dict[str, Any], list[str]]:
    """What is missing from the merge: ``(counts, warnings)``. Counts: ``shards``,
    ``missing_shards`` (``"i/n"`` never given), ``partial_shards`` (folder -> episodes
    present and planned), ``episodes_missing``, ``episodes_failed``, ``episodes_repeated``
    (episodes found in more than one folder, pooled once)."""
    warnings: list[str] = []
    indexed = [s.index for s in shards if s.index is not None]
    missing: list[str] = []
    if indexed and len({n for _, n in indexed}) == 1:
        n = indexed[0][1]
        given = [i for i, _ in indexed]
        missing = [f"{i}/{n}" for i in range(n) if i not in given]
        if missing:
            warnings.append(f"shard(s) {', '.join(missing)} of {n} not given: the merge covers {len(set(given))} of {n} shards")
        for i in sorted({i for i in given if given.count(i) > 1}):
            warnings.append(f"shard {i}/{n} given more than once")
    repeated = sum(len(s.lines) for s in shards) - len({key for s in shards for key in s.lines})
    if repeated and not any("more than once" in w for w in warnings):
        # the same episodes twice (one run given twice, or unsharded runs of one config):
        # pooled once, so the merge holds fewer episodes than the folders together
        warnings.append(f"{repeated} episode(s) appear in more than one folder (same key, same result) and are counted once: was a run given twice?")
    partial: dict[str, dict[str, int]] = {}
    for s in shards:
        planned = planned_keys(s)
        if planned is not None:
            absent = planned - set(s.lines)
            if absent:
                partial[str(s.path)] = {"present": len(planned) - len(absent), "planned": len(planned)}
                warnings.append(
                    f"{s.name} holds {len(planned) - len(absent)} of the {len(planned)} episodes its config plans "
                    "(killed or still running?); rerun it in the same folder to finish it"
                )
        elif not s.metrics:
            partial[str(s.path)] = {"present": len(s.lines), "planned": -1}
            warnings.append(f"{s.name} has no metrics.json: it did not finish (killed or still running?)")
    failed = sum(s.failed for s in shards)
    if failed:
        warnings.append(f"{failed} episode(s) failed in the shards; rerun those shards in their folders to retry them")
    counts = {
        "shards": len(shards),
        "missing_shards": missing,
        "partial_shards": partial,
        "episodes_missing": sum(p["planned"] - p["present"] for p in partial.values() if p["planned"] >= 0),
        "episodes_failed": failed,
        "episodes_repeated": repeated,
    }
    return counts, warnings


def merge_runs(
    out: str | Path, shards: list[str | Path], compare_to: str | None = None, *, overwrite: bool = False, compress: bool = True
) -> dict:
    """Join the shard run folders into ``out``; returns the merged ``metrics.json``, whose
    ``merge`` key holds what :func:`completeness` found (and ``merge.warnings``). The
    episodes go to ``episodes.jsonl.gz`` (``compress=False``: ``episodes.jsonl``; an earlier
    merge replaced with ``overwrite`` keeps its file's form). Raises :class:`UserError` for
    what the module docstring lists as refused (``RunFolderError`` for an ``out`` holding both
    episodes files); nothing is written then."""
    from rescue_env.experiments.rollout import write_figures

    out = Path(out)
    if (problem := out_problem(out, [Path(s) for s in shards], overwrite)) is not None:
        raise UserError(problem)
    read = [read_shard(s) for s in shards]
    if (problem := settings_problem(read)) is not None:
        raise UserError(problem)
    lines: dict[str, str] = {}
    for shard in read:
        for key, line in shard.lines.items():
            if key in lines and lines[key] != line:
                raise UserError(f"{key} differs between shards ({shard.path} and another): were they run with different settings?")
            lines[key] = line
    agent_of = {k: json.loads(line)["agent"] for k, line in lines.items()}
    if compare_to is not None:  # checked before anything is written
        reference_of({a: [] for a in dict.fromkeys(agent_of.values())}, compare_to, {})
    counts, warnings = completeness(read)
    order = sorted(lines, key=lambda k: (agent_of[k], k))
    records: dict[str, list[EpisodeRecord]] = {}
    for key in order:  # every line an episode before anything is written
        try:
            records.setdefault(agent_of[key], []).append(record_from_json(json.loads(lines[key])))
        except (KeyError, ValueError, TypeError, AttributeError) as exc:
            raise UserError(f"{key}: not an episode line ({exc})") from None
    target = episodes_file(out, compress=compress)  # an earlier merge's form, else gzip when compress
    out.mkdir(parents=True, exist_ok=True)
    with atomic_open(target, "wb") as fh:
        fh.write(encode_lines([lines[k] for k in order], compress=target.name.endswith(".gz")))
    recorded = next((s.metrics for s in read if "compare_to" in s.metrics), {})
    comparison = compare(records, reference_of(records, compare_to, recorded))
    metrics = {"merged_from": [str(s) for s in shards], **comparison, "merge": {**counts, "warnings": warnings},
               "shards": [s.metrics for s in read]}
    write_figures(out, metrics, comparison)
    config = Path(shards[0]) / ".hydra" / "config.yaml"
    write_report(out, comparison, records, config_text=config.read_text(encoding="utf-8") if config.is_file() else "")
    return metrics


def merge_main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rescue merge", description="Join the run folders of a sharded rollout (shard=i/n).")
    parser.add_argument("out", help="the merged run folder to write (a new folder)")
    parser.add_argument("shards", nargs="+", help="the shards' run folders")
    parser.add_argument("--compare-to", default=None, help="reference agent of the paired Δ (default: the shards')")
    parser.add_argument("--overwrite", action="store_true", help="replace OUT when it holds an earlier merge")
    parser.add_argument("--plain", action="store_true", help="write plain episodes.jsonl (default: gzip episodes.jsonl.gz)")
    args = parser.parse_args(argv)
    try:
        metrics = merge_runs(args.out, args.shards, args.compare_to, overwrite=args.overwrite, compress=not args.plain)
    except USER_ERRORS as exc:
        report_error(str(exc), "rescue merge")
        return EXIT_USER_ERROR
    from rescue_env.experiments.rollout import console_table
    from rescue_env.report import console_rows

    print(console_table(*console_rows(metrics)))
    print(f"merged {len(args.shards)} shard(s) into {args.out} (report.html, summary.csv, metrics.json)")
    for warning in metrics["merge"]["warnings"]:
        print(f"rescue merge: warning: {warning}", file=sys.stderr)
    return EXIT_SOME_FAILED if metrics["merge"]["warnings"] else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rescue report", description="Re-render report.html of a rollout run folder.")
    parser.add_argument("run_dir", help="a `rescue rollout` run folder (with episodes.jsonl.gz or episodes.jsonl)")
    parser.add_argument("--compare-to", default=None, help="reference agent of the paired Δ (default: the run's)")
    args = parser.parse_args(argv)
    try:
        path = rebuild_report(args.run_dir, args.compare_to)
    except USER_ERRORS as exc:
        report_error(str(exc), "rescue report")
        return EXIT_USER_ERROR
    print(f"report: {path}")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
