"""The ``rescue`` console script's entry point.

It imports the command line (:mod:`rescue_env.experiments.cli`) inside its own guard: a
Ctrl-C during the seconds those imports take (numba, Hydra, the simulator) ends like a
Ctrl-C anywhere else, with one line and exit code 130, not a Python traceback.
"""

from __future__ import annotations

import sys

from rescue_env.experiments.exit_codes import EXIT_INTERRUPTED


def main() -> int:
    """Run ``rescue`` with ``sys.argv`` and return its exit code."""
    try:
        from rescue_env.experiments.cli import main as run

        return run()
    except KeyboardInterrupt:
        print("\nrescue: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    raise SystemExit(main())
