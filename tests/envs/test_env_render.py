"""Rendering: ``ansi`` text with the state summary, ``rgb_array`` images (item 9)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rescue_env import parallel_env
from rescue_env.envs.gym_env import GroupSupportEnv


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_ansi_has_state_summary_and_transcript(scenario):
    env = GroupSupportEnv(scenario, render_mode="ansi")
    env.reset(seed=1)
    text = env.render()
    assert isinstance(text, str)
    assert env.state.summary() in text
    assert "t=0" in text
    enc = env.encoding
    env.step(enc.encode(0, 0))
    text = env.render()
    assert "t=1" in text and env.state.summary() in text
    assert f"[{enc.strategy_names[0]}]" in text  # the therapist row of the step
    assert env.session.members[0] in text
    env.step(0)
    text = env.render()
    assert "keeps listening" in text
    for r in env._last[1]:
        assert r.dialogue_cleaned in text


@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_rgb_array_image(scenario):
    env = gym.make(f"rescue_env/{scenario.capitalize()}-v0", render_mode="rgb_array")
    env.reset(seed=2)
    img = env.render()
    assert isinstance(img, np.ndarray)
    assert img.ndim == 3 and img.shape[2] == 3 and img.shape[0] > 50 and img.shape[1] > 50
    assert img.dtype == np.uint8
    assert len(np.unique(img.reshape(-1, 3), axis=0)) > 10  # a drawing, not a blank canvas
    env.step(0)
    assert env.render().shape == img.shape


def test_render_without_mode_returns_none():
    env = GroupSupportEnv("couple")
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="render_mode"):
        assert env.render() is None


def test_parallel_env_renders():
    par = parallel_env(scenario="family", render_mode="ansi")
    par.reset(seed=0)
    assert par.session.state.summary() in par.render()
    par = parallel_env(scenario="couple", render_mode="rgb_array")
    par.reset(seed=0)
    img = par.render()
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
