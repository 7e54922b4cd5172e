"""Prompts laid out for a server's prompt cache: what repeats comes first, and a role's next
prompt extends its last one."""

from __future__ import annotations

import os

import pytest

from rescue_env.llm import prompts

LINES = [prompts.line("Ana" if i % 2 else "Ben", "Therapist", f"turn {i}: it keeps happening") for i in range(60)]


def common_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def test_the_shown_window_keeps_its_start_for_several_turns():
    """The start moves in half-window steps: most turns only append lines."""
    window = 12
    starts = [prompts.window_start(n, window) for n in range(len(LINES) + 1)]
    for n, start in enumerate(starts):
        assert min(n, window) <= n - start < window + window // 2, "at least the window's lines are shown, never half as many more"
    moves = sum(a != b for a, b in zip(starts, starts[1:]))
    assert moves <= len(LINES) // (window // 2), "the start moved more often than once per half window"


def test_a_clients_next_prompt_extends_its_last_one_up_to_its_tail():
    """Everything before the private state and cue (instructions, persona, transcript) stays a
    prefix of the next step's prompt on every step whose window did not move."""
    system = prompts.persona_system("couple", "Ana", "the wife", ["Ben"], "Couple")
    kept = 0
    for n in range(20, 40):
        before = system + prompts.persona_user(prompts.transcript_block(LINES[:n], 16), "calm", "Your turn.")
        after = system + prompts.persona_user(prompts.transcript_block(LINES[: n + 1], 16), "hurt", "Your turn.")
        stable = before.index("\n\nYour private state")
        kept += common_prefix(before, after) >= stable
    assert kept >= 20 - -(-20 // 8), "the prefix broke more than once per half window"


def test_instructions_come_before_names_so_clients_and_sessions_share_them():
    ana = prompts.persona_system("couple", "Ana", "the wife", ["Ben"], "Couple")
    ben = prompts.persona_system("couple", "Ben", "the husband", ["Ana"], "Couple")
    shared = common_prefix(ana, ben)
    assert shared > 0.8 * len(ana) and "Ana" not in ana[:shared]
    one = prompts.therapist_system("couple", ["Ana", "Ben"], ["Ana", "Ben", "Ana & Ben"])
    other = prompts.therapist_system("couple", ["Kim", "Lee"], ["Kim", "Lee", "Kim & Lee"])
    assert common_prefix(one, other) > 0.9 * len(one)
    first = prompts.annotator_messages("couple", ["Ana", "Ben"], "x", None)[0]["content"]
    second = prompts.annotator_messages("couple", ["Kim", "Lee"], "y", "blame")[0]["content"]
    assert first == second, "the annotator's system prompt names no one"


@pytest.mark.parametrize("window", [1, 4, 16])
def test_the_newest_line_is_always_shown(window):
    block = prompts.transcript_block(LINES, window)
    assert block.endswith(LINES[-1]) and ("earlier turns" in block) == (prompts.window_start(len(LINES), window) > 0)
