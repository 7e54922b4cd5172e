"""The simulator core's public face: named state, client agents' turns, the compile notice."""

from __future__ import annotations

import time

import numpy as np

from rescue_env import core as core_module
from rescue_env.core import FREE, SILENT, State
from rescue_env.dynamics.base import Behaviour
from rescue_env.envs.gym_env import GroupSupportEnv


def test_the_state_is_named_arrays_one_row_per_session():
    env = GroupSupportEnv("family")
    env.reset(seed=0)
    S = env.core.state
    assert isinstance(S, State) and set(S._fields) >= {"distress", "stance", "pattern", "t", "streak", "sigma_return"}
    n = env.core.group_size(0)
    np.testing.assert_array_equal(S.distress[0, :n], env.session.state.distress)
    env.step(0)
    assert env.core.steps(0) == S.t[0] == 1


def test_client_agents_turns_are_set_and_handed_back():
    env = GroupSupportEnv("couple", record_transcript=True, terminate_on_settle=False)
    env.reset(seed=1)
    core = env.core
    core.set_behaviours(0, {0: Behaviour(3, 1), 1: None})
    assert core.state.behaviour_type[0].tolist() == [3, SILENT]
    core.clear_behaviours(0)
    assert core.state.behaviour_type[0].tolist() == [FREE, FREE]
    # through the env: the agent's turn is played as given, the silent slot says nothing
    _, _, _, _, info = env.play(0, {0: Behaviour(3, 1), 1: None})
    assert [(t[0], t[1], t[2]) for t in core.turns(0)] == [(0, 3, 1)]
    assert core.state.behaviour_type[0].tolist() == [FREE, FREE]


def test_the_compile_notice_speaks_once_when_the_process_is_busy(capsys, monkeypatch):
    monkeypatch.setattr(core_module._CompileNotice, "CPU_S", 0.2)
    monkeypatch.setattr(core_module._CompileNotice, "printed", False)
    with core_module._CompileNotice():
        t0 = time.process_time()
        while time.process_time() - t0 < 1.2:  # busy, as numba compiling is
            pass
    with core_module._CompileNotice():
        t0 = time.process_time()
        while time.process_time() - t0 < 1.2:
            pass
    assert capsys.readouterr().err.count("compiling the simulator") == 1


def test_no_compile_notice_while_idle(capsys, monkeypatch):
    monkeypatch.setattr(core_module._CompileNotice, "CPU_S", 0.5)
    monkeypatch.setattr(core_module._CompileNotice, "printed", False)
    with core_module._CompileNotice():
        time.sleep(1.2)  # waiting (a loaded machine), not compiling
    assert "compiling" not in capsys.readouterr().err
