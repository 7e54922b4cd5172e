"""The ``rescue`` console script.

``rescue data ...``, ``rescue summarize DIR``, ``rescue report RUN_DIR`` and ``rescue merge
OUT SHARD_DIR...`` are plain commands; every command that runs an experiment (``rollout``, ``train``, ``calibrate``,
``eval-tasks``, ``judge``) is a Hydra app and takes Hydra overrides (``rescue rollout episodes=4 data.path=my.jsonl``,
``rescue train -m reward.lam=0,0.5 seed=0,1``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from rescue_env.experiments.errors import EXIT_BUG, EXIT_INTERRUPTED, EXIT_OK, EXIT_USER_ERROR, report_error, take_outcome

#: subcommand -> module whose ``main()`` is a ``@hydra.main`` app.
HYDRA_COMMANDS: dict[str, str] = {
    "rollout": "rescue_env.experiments.rollout",
    "train": "rescue_env.experiments.train",
    "calibrate": "rescue_env.experiments.calibrate",
    "eval-tasks": "rescue_env.experiments.eval_tasks",
    "judge": "rescue_env.experiments.judge",
}

USAGE = """usage: rescue COMMAND [ARGS...]

commands:
  data validate PATH... [--strict] check .jsonl files or directories of dialogues (one data set)
  data export PATH OUT.jsonl [--in-place]
                                  load dialogues from PATH and write them as JSON Lines
                                  (atomically; OUT = PATH only with --in-place)
  data fetch [DEST] [--sha256 H]  download the public release (benchmark_191.jsonl), check it
  judge agreement --human H.csv [--judge J.csv | --run DIR]
                                  judge-vs-human agreement (exact, MAE, quadratic κ)
  summarize DIR [--include-failed] one table of a sweep's jobs: mean ± 95 % CI, IQM, paired Δ
  report RUN_DIR [--compare-to A] re-render report.html of a rollout run folder
  merge OUT SHARD_DIR... [--plain] join a sharded rollout's run folders (shard=i/n) into a new OUT
{hydra}
Hydra commands take overrides, e.g. `rescue rollout episodes=4 seed=1`;
`rescue COMMAND --help` lists their configuration.
Exit codes: 0 done, 1 bug, 2 bad input (nothing run), 3 some episodes failed, 130 interrupted."""


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
    e.add_argument("--in-place", action="store_true", help="allow OUT to be the input file (replaced atomically)")
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

    if args.action == "export" and (problem := export_target_problem(args.path, args.out, args.in_place)):
        report_error(problem, "rescue data export")
        return EXIT_USER_ERROR
    report = validate(args.path or None, strict=getattr(args, "strict", False))
    if report.errors:
        for p in report.errors:
            print(p, file=sys.stderr)
        print(f"{len(report.errors)} error(s); nothing loaded", file=sys.stderr)
        return EXIT_USER_ERROR
    if args.action == "validate":
        print(report.summary())
        return EXIT_OK
    try:
        out = write_jsonl(report.dialogues, args.out)
    except OSError as exc:
        report_error(f"cannot write {args.out}: {exc.strerror or exc}", "rescue data export")
        return EXIT_USER_ERROR
    print(f"wrote {len(report.dialogues)} dialogues to {out}")
    return EXIT_OK


def export_target_problem(source: str, out: str, in_place: bool) -> str | None:
    """Why ``rescue data export SOURCE OUT`` must not write OUT (None when it may)."""
    target = Path(out)
    if target.is_dir():
        return f"{out} is a directory; give the output file, e.g. {target / 'dialogues.jsonl'}"
    src = Path(source)
    if target.exists() and src.exists() and os.path.samefile(src, target) and not in_place:
        return f"{out} is the input file; export to another file, or pass --in-place to replace it (atomically)"
    if src.is_dir() and target.resolve().is_relative_to(src.resolve()) and target.suffix in (".json", ".jsonl"):
        return f"{out} lies inside the input directory {source} and would be read as a dialogue next time; write it elsewhere"
    parent = target.parent if str(target.parent) else Path(".")
    existing = next((p for p in (parent, *parent.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        return f"cannot write {out}: {existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"cannot write {out}: no write permission in {existing}"
    if target.exists() and not os.access(target, os.W_OK):
        return f"cannot write {out}: the file is read-only"
    return None


#: an override of a key-like setting: llm.api_key=..., +llm.api_key=..., ++api_key=...
_KEY_OVERRIDE_RE = re.compile(r"^[+~]{0,2}(?:[\w.]*\.)?api_?key(?:=|$)", re.IGNORECASE)


def refused_override(overrides: list[str]) -> str | None:
    """Why a command line must not reach Hydra (it would save a key into the run folder)."""
    from rescue_env.experiments.guard import key_setting_message
    from rescue_env.secrets import looks_like_key

    for arg in overrides:
        if arg.startswith("-"):
            continue
        key, sep, value = arg.partition("=")
        if _KEY_OVERRIDE_RE.match(arg):
            return key_setting_message(key.lstrip("+~"))
        if sep and looks_like_key(value):
            return f"{key.lstrip('+~')} holds what looks like an API key; keys go in the environment variable named by llm.api_key_env"
    return None


def run_hydra_command(cmd: str, module_name: str, rest: list[str]) -> int:
    """Run a Hydra command and map its end to an exit code (see :mod:`rescue_env.experiments.errors`)."""
    if (problem := refused_override(rest)) is not None:
        report_error(problem, f"rescue {cmd}")
        return EXIT_USER_ERROR
    module = importlib.import_module(module_name)
    # Hydra reads sys.argv; present the subcommand as the program name.
    sys.argv = [f"rescue-{cmd}", *rest]
    take_outcome()
    with scrubbed_console():
        return _run_hydra_main(cmd, module)


@contextlib.contextmanager
def scrubbed_console() -> Iterator[None]:
    """Scrub secrets from everything printed while a command runs (tracebacks included;
    the log files get the same filter from ``@user_errors``)."""
    from rescue_env.secrets import ScrubbingStream

    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = ScrubbingStream(sys.stdout), ScrubbingStream(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def _run_hydra_main(cmd: str, module) -> int:  # noqa: ANN001 (a command module)
    try:
        result = module.main()
    except SystemExit as exc:
        if isinstance(exc.code, str):  # sys.exit("message"): Python would print it
            report_error(exc.code, f"rescue {cmd}")
            take_outcome()
            return EXIT_USER_ERROR
        code = exc.code if isinstance(exc.code, int) else (EXIT_OK if exc.code is None else EXIT_BUG)
        _, composed = take_outcome()
        # Hydra exits 1 on a composition error (a typo, a wrong type, a missing group
        # option) before any config exists: that is the user's input, not a bug.
        return EXIT_USER_ERROR if code == EXIT_BUG and not composed else code
    except KeyboardInterrupt:
        take_outcome()
        print(f"rescue {cmd}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    outcome, _ = take_outcome()
    return max(outcome, int(result) if isinstance(result, int) else EXIT_OK)


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
    except fetch.FetchError as exc:  # a download or a check that failed: nothing changed
        report_error(str(exc), "rescue data fetch")
        return EXIT_USER_ERROR
    print(
        f"{result.path}: {result.dialogues} dialogues ({result.couples} couple, {result.families} family), "
        f"sha256 {result.sha256}\nuse it with data.path={result.path}"
    )
    return EXIT_OK


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
        from rescue_env.experiments.summarize import main as summarize_main

        return summarize_main(rest)
    if cmd == "report":
        from rescue_env.experiments.report import main as report_main

        return report_main(rest)
    if cmd == "merge":
        from rescue_env.experiments.report import merge_main

        return merge_main(rest)
    if cmd in hydra_cmds:
        return run_hydra_command(cmd, hydra_cmds[cmd], rest)
    print(f"rescue: unknown command {cmd!r}\n" + USAGE.format(hydra=listing), file=sys.stderr)
    return EXIT_USER_ERROR


if __name__ == "__main__":
    raise SystemExit(main())
