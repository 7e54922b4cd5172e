"""The ``rescue`` console entry: a Ctrl-C while the commands are still being imported ends
with one line and exit code 130 (it printed a Python traceback); otherwise it is the CLI."""

from __future__ import annotations

import builtins
import sys

from rescue_env.experiments import console
from rescue_env.experiments.exit_codes import EXIT_INTERRUPTED


def test_ctrl_c_during_the_imports_is_one_line_and_exit_130(monkeypatch, capsys):
    real_import = builtins.__import__

    def interrupted(name, *args, **kwargs):
        if name == "rescue_env.experiments.cli":
            raise KeyboardInterrupt  # as if Ctrl-C landed while numba and Hydra load
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", interrupted)
    assert console.main() == EXIT_INTERRUPTED
    err = capsys.readouterr().err
    assert err.strip() == "rescue: interrupted" and "Traceback" not in err


def test_ctrl_c_in_a_plain_command_is_one_line_and_exit_130(monkeypatch, capsys):
    from rescue_env.experiments import summarize

    def interrupted(argv=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(summarize, "main", interrupted)
    monkeypatch.setattr(sys, "argv", ["rescue", "summarize", "somewhere"])
    assert console.main() == EXIT_INTERRUPTED
    assert capsys.readouterr().err.strip() == "rescue: interrupted"


def test_the_entry_runs_the_command_line(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["rescue", "--help"])
    assert console.main() == 0
    assert "usage: rescue COMMAND" in capsys.readouterr().out
