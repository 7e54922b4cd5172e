"""The ``rescue`` console script.

``rescue data ...``, ``rescue summarize DIR``, ``rescue report RUN_DIR`` and ``rescue merge
OUT SHARD_DIR...`` are plain commands; every command that runs an experiment (``rollout``, ``train``, ``calibrate``,
``eval-tasks``, ``judge``) is a Hydra app and takes Hydra overrides (``rescue rollout episodes=4 data.path=my.jsonl``,
``rescue train -m reward.lam=0,0.5 seed=0,1``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

#: subcommand -> module whose ``main()`` is a ``@hydra.main`` app.
HYDRA_COMMANDS: dict[str, str] = {
    "rollout": "experiments.rollout",
    "train": "experiments.train",
    "calibrate": "experiments.calibrate",
    "eval-tasks": "experiments.eval_tasks",
    "judge": "experiments.judge",
}

USAGE = """usage: rescue COMMAND [ARGS...]

commands:
  data validate PATH... [--strict] check .jsonl files or directories of dialogues (one data set)
  data export PATH OUT.jsonl      load dialogues from PATH and write them as JSON Lines
  data fetch [DEST] [--sha256 H]  download the public release (benchmark_191.jsonl), check it
  judge agreement --human H.csv [--judge J.csv | --run DIR]
                                  judge-vs-human agreement (exact, MAE, quadratic κ)
  summarize DIR [--reps N]        one table of a sweep's jobs: mean ± 95 % CI, IQM, paired Δ
  report RUN_DIR [--compare-to A] re-render report.html of a rollout run folder
  merge OUT SHARD_DIR...          join a sharded rollout's run folders (shard=i/n) into OUT
{hydra}
Hydra commands take overrides, e.g. `rescue rollout episodes=4 seed=1`;
`rescue COMMAND --help` lists their configuration."""


def _available_hydra_commands() -> dict[str, str]:
    out = {}
    for name, module in HYDRA_COMMANDS.items():
        if importlib.util.find_spec(module) is not None:
            out[name] = module
    return out


def data_main(argv: list[str]) -> int:
    """``rescue data ...``: validation and conversion of dialogue files."""
    parser = argparse.ArgumentParser(prog="rescue data", description="Check and convert RESCUE-BENCH dialogue files.")
    sub = parser.add_subparsers(dest="action", required=True)
    v = sub.add_parser("validate", help="check a .jsonl file or a directory of per-sample .json files")
    v.add_argument("path", nargs="*", default=None, help="files or directories, read as one data set (default: the bundled seeds)")
    v.add_argument("--strict", action="store_true", help="unknown labels are errors, not warnings")
    e = sub.add_parser("export", help="write dialogues as JSON Lines (repaired text)")
    e.add_argument("path")
    e.add_argument("out")
    f = sub.add_parser("fetch", help="download the public RESCUE-BENCH release (benchmark_191.jsonl) and check it")
    f.add_argument("dest", nargs="?", default="benchmark_191.jsonl", help="where to write it (default ./benchmark_191.jsonl)")
    f.add_argument("--url", default=None, help="another copy of the release (default: GitHub, pinned commit)")
    f.add_argument("--sha256", default=None, help="expected SHA-256 of the file")
    f.add_argument("--expect", type=int, default=None, help="expected number of dialogues (default 191 for the release)")
    f.add_argument("--force", action="store_true", help="download again even if DEST exists")
    args = parser.parse_args(argv)
    if args.action == "fetch":
        return fetch_main(args)

    from rescue_env.data import validate, write_jsonl

    report = validate(args.path or None, strict=getattr(args, "strict", False))
    if report.errors:
        for p in report.errors:
            print(p, file=sys.stderr)
        print(f"{len(report.errors)} error(s); nothing loaded", file=sys.stderr)
        return 1
    if args.action == "validate":
        print(report.summary())
        return 0
    out = write_jsonl(report.dialogues, args.out)
    print(f"wrote {len(report.dialogues)} dialogues to {out}")
    return 0


def fetch_main(args: argparse.Namespace) -> int:
    """``rescue data fetch``: download, check and summarise the public release."""
    from rescue_env.data import fetch

    kwargs = {"force": args.force}
    if args.url:
        kwargs["url"] = args.url
    if args.sha256:
        kwargs["sha256"] = args.sha256
    if args.expect is not None:
        kwargs["expected_dialogues"] = args.expect
    elif args.url:
        kwargs["expected_dialogues"] = None  # another file: no count to hold it to
    try:
        result = fetch.fetch_release(args.dest, **kwargs)
    except fetch.FetchError as exc:
        print(f"rescue data fetch: {exc}", file=sys.stderr)
        return 1
    print(
        f"{result.path}: {result.dialogues} dialogues ({result.couples} couple, {result.families} family), "
        f"sha256 {result.sha256}\nuse it with data.path={result.path}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    hydra_cmds = _available_hydra_commands()
    listing = "".join(f"  {name:<31} (Hydra app)\n" for name in hydra_cmds)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE.format(hydra=listing))
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd == "data":
        return data_main(rest)
    if cmd == "summarize":
        from experiments.summarize import main as summarize_main

        return summarize_main(rest)
    if cmd == "report":
        from experiments.report import main as report_main

        return report_main(rest)
    if cmd == "merge":
        from experiments.report import merge_main

        return merge_main(rest)
    if cmd in hydra_cmds:
        module = importlib.import_module(hydra_cmds[cmd])
        # Hydra reads sys.argv; present the subcommand as the program name.
        sys.argv = [f"rescue-{cmd}", *rest]
        result = module.main()
        return int(result) if isinstance(result, int) else 0
    print(f"rescue: unknown command {cmd!r}\n" + USAGE.format(hydra=listing), file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
