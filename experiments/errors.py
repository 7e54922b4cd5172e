"""Exit codes and the one-line reporting of user errors for every ``rescue`` command.

Exit codes (the README's "Errors and exit codes"):

- ``0`` — the command did everything it was asked;
- ``1`` — a bug: an unexpected exception, printed with its traceback;
- ``2`` — a user error: a bad setting, bad data, a refused run folder; one line on stderr
  (``rescue rollout: error: ...``), nothing run, no output file changed;
- ``3`` — the command ran, wrote everything it has, but some work items failed (LLM
  episodes that failed for good); the summary says how many and why;
- ``130`` — interrupted (Ctrl-C); what was finished is on disk and a rerun resumes.

``HYDRA_FULL_ERROR=1`` shows the traceback of a user error too (as Hydra does).
"""

from __future__ import annotations

import functools
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from rescue_env.agents.base import PolicyError, PriorError
from rescue_env.data.errors import DataValidationError
from rescue_env.llm.local_server import LocalServerError
from rescue_env.rollout import RunFolderError
from rescue_env.secrets import install_log_scrubber, scrub

# the codes themselves live in a module that imports nothing (the console entry names them
# before these imports); the commands take them from here
from rescue_env.experiments.exit_codes import EXIT_BUG, EXIT_INTERRUPTED, EXIT_OK, EXIT_SOME_FAILED, EXIT_USER_ERROR  # noqa: F401

F = TypeVar("F", bound=Callable[..., Any])


class UserError(Exception):
    """A mistake in what the user gave (a setting, a file, a run folder): reported as one
    line naming the cause and the fix, with exit code 2."""


class ConfigError(UserError):
    """A setting out of its range or of the wrong kind, found when the config is composed."""


#: Exceptions reported as user errors (exit 2) without a traceback.
# (the embedded LLM server's: not installed, no model file, it would not start)
# (a run folder holding both episodes files)
USER_ERRORS: tuple[type[BaseException], ...] = (UserError, DataValidationError, LocalServerError, RunFolderError, PriorError, PolicyError)

# The worst outcome recorded by the jobs of this process (a sweep runs several): the
# ``rescue`` entry point returns it once Hydra is done.
_outcome = EXIT_OK
# Set once Hydra has composed a config (the guard saw it): a Hydra exit before that is a
# composition error (a typo, a wrong type in an override), i.e. a user error.
_composed = False


def record_outcome(code: int) -> None:
    """Note a job's exit status (the process exits with the highest one noted)."""
    global _outcome
    _outcome = max(_outcome, code)


def mark_composed() -> None:
    """Hydra composed the config (called by the guard callback)."""
    global _composed
    _composed = True


def take_outcome() -> tuple[int, bool]:
    """(worst exit status noted, whether a config was composed), and reset both."""
    global _outcome, _composed
    out = (_outcome, _composed)
    _outcome, _composed = EXIT_OK, False
    return out


def prog_name() -> str:
    """``rescue rollout`` for the program Hydra runs as ``rescue-rollout``."""
    name = os.path.basename(sys.argv[0] or "rescue")
    return name.replace("rescue-", "rescue ", 1) if name.startswith("rescue-") else name


def full_error() -> bool:
    """The user asked for tracebacks (``HYDRA_FULL_ERROR=1``, as in Hydra)."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def report_error(message: str, prog: str | None = None) -> None:
    """Print a user error to stderr, one problem per line, key-shaped text removed."""
    lines = scrub(str(message)).strip().splitlines() or ["(no message)"]
    head = f"{prog or prog_name()}: error: "
    print(head + lines[0], file=sys.stderr)
    for line in lines[1:]:
        print("  " + line, file=sys.stderr)


def fail(message: str, exc: BaseException | None = None) -> None:
    """Report a user error and exit with code 2; with ``HYDRA_FULL_ERROR=1`` the traceback
    of ``exc`` is printed first.

    It exits rather than raising: Hydra turns an exception of a callback into a warning
    and goes on with the run."""
    if full_error() and exc is not None:
        traceback.print_exception(exc, file=sys.stderr)
    report_error(message)
    raise SystemExit(EXIT_USER_ERROR)


def user_errors(fn: F) -> F:
    """Decorate a command's entry point (a Hydra task function or a plain ``main``): a user
    error becomes one line on stderr and exit code 2, Ctrl-C exit code 130; anything else
    propagates (a bug: Hydra prints it and exits 1).

    Raising ``SystemExit`` (not returning) stops Hydra at once, before it adds its own
    "Error executing job" lines. A job of a sweep (``-m``) neither exits nor raises: the
    others must go on (:mod:`rescue_env.experiments.sweep`).
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        install_log_scrubber()  # Hydra has set up the console and file log handlers by now
        from rescue_env.experiments import sweep

        if sweep.in_sweep():
            return sweep.run_job(fn, args, kwargs)
        try:
            return fn(*args, **kwargs)
        except USER_ERRORS as exc:
            fail(str(exc), exc)
        except KeyboardInterrupt:
            if full_error():
                raise
            print(f"{prog_name()}: interrupted", file=sys.stderr)
            raise SystemExit(EXIT_INTERRUPTED) from None

    return wrapper  # type: ignore[return-value]
