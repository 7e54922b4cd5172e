"""The simulator core's public face: named state, client agents' turns, the compile notice,
the actions it takes."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import pytest

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


def test_a_strided_action_array_plays_as_its_contiguous_copy():
    """The core calls its compiled entry directly; actions of any layout or integer type are
    made the one kind it is compiled for, so they play the same moves."""
    def run(make_actions):
        venv = gym.make_vec("rescue_env/Family-v0", num_envs=6, vectorization_mode="vector_entry_point")
        venv.reset(seed=4)
        core = venv.unwrapped.core
        rng = np.random.default_rng(0)
        for _ in range(40):
            masks = core.masks()
            acts = np.where(masks, rng.random(masks.shape), -1.0).argmax(axis=1)
            core.step(make_actions(acts), core_module.NEXT_STEP)
        return core.obs.copy(), core.rewards.copy()

    plain = run(lambda a: a.astype(np.int64))
    strided = run(lambda a: np.repeat(a.astype(np.int64), 2)[::2])  # every other element
    small = run(lambda a: a.astype(np.int16))
    for other in (strided, small):
        np.testing.assert_array_equal(plain[0], other[0])
        np.testing.assert_array_equal(plain[1], other[1])


def test_actions_of_the_wrong_shape_are_refused_by_name():
    env = GroupSupportEnv("couple")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"actions must be a vector of 1 integers, got shape \(1, 2\)"):
        env.core.step(np.zeros((1, 2), np.int64))


def test_turns_set_from_outside_are_the_turn_observed():
    """LLM clients' turns (``set_turns``) replace the model's: the observation and the state
    show the last of them (speaker, whom it addressed, its type)."""
    from rescue_env.core import TO_GROUP

    env = GroupSupportEnv("couple", terminate_on_settle=False)
    env.reset(seed=2)
    core = env.core
    core.transition(np.zeros(1, np.int64))
    core.set_turns(0, [(1, 2, 0), (0, 5, TO_GROUP)])
    core.finish()
    obs = env.observer.unflatten(core.obs[0])
    assert obs["speaker"].tolist() == [1.0, 0.0]
    assert obs["spoken_to"].tolist() == [0.0, 0.0, 0.0, 1.0]
    assert int(np.argmax(obs["utterance"])) == 5 and obs["utterance"].sum() == 1.0
    st = core.state_view(0, env.session.state)
    assert st.last_client == st.members[0] and st.last_addressee == ("Couple",)
