"""The ``rescue`` console script.

``rescue data validate PATH... [--strict]`` is a plain command; every command that runs an
experiment (``rollout``, ``train``, ``calibrate``, ``eval-tasks``, ``judge``, ``report``) is a
Hydra app and takes Hydra overrides (``rescue rollout episodes=4 data.path=my.jsonl``,
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
    "report": "experiments.report",
}

USAGE = """usage: rescue COMMAND [ARGS...]

commands:
  data validate PATH... [--strict] check .jsonl files or directories of dialogues (one data set)
  data export PATH OUT.jsonl      load dialogues from PATH and write them as JSON Lines
  judge agreement --human H.csv [--judge J.csv | --run DIR]
                                  judge-vs-human agreement (exact, MAE, quadratic κ)
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
    args = parser.parse_args(argv)

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
