"""Prompts laid out for a server's prompt cache: what repeats comes first, every role of a
session shares it, and each call's prompt extends the previous call's."""

from __future__ import annotations

import os

import pytest

from rescue_env.llm import prompts
from rescue_env.taxonomy import label_info

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


def text(messages: list[dict[str, str]]) -> str:
    return "\n".join(m["content"] for m in messages)


def shared_part(messages: list[dict[str, str]]) -> str:
    """Everything before the role's tail."""
    whole = text(messages)
    return whole[: whole.index(f"\n\n{prompts.TAIL_MARK}\n")]


def call(n: int, who: str) -> list[dict[str, str]]:
    """The prompt of ``who`` (a client's name or the therapist) after ``n`` lines."""
    tail = prompts.therapist_tail("Group state: calm.") if who == "T" else prompts.persona_tail(who, "a partner", "calm", "Your turn.", "Couple")
    return prompts.session_messages("couple", ["Ana", "Ben"], LINES[:n], 16, tail)


def test_every_role_of_a_session_shares_everything_before_its_tail():
    """The therapist and each client see one system prompt and one transcript; only the tail
    after them (who plays now, a private view, the cue) differs."""
    therapist, ana, ben = call(10, "T"), call(10, "Ana"), call(10, "Ben")
    assert shared_part(therapist) == shared_part(ana) == shared_part(ben)
    assert LINES[9] in shared_part(ana) and "Ana, a partner" not in shared_part(ana) and "Group state" not in shared_part(therapist)
    assert "calm\n\nYour turn." in text(ana) and "Your move now." in text(therapist)


def test_each_call_extends_the_previous_calls_shared_part_across_roles():
    """Calls of alternating roles, each with one more line: the previous call's shared part is
    a prefix of the next one's on every step whose window did not move."""
    kept = 0
    for n in range(20, 40):
        before, after = call(n, ["T", "Ana", "Ben"][n % 3]), call(n + 1, ["T", "Ana", "Ben"][(n + 1) % 3])
        kept += text(after).startswith(shared_part(before))
    assert kept >= 20 - -(-20 // 8), "the prefix broke more than once per half window"


def test_instructions_come_before_names_so_sessions_share_them():
    one = prompts.session_system("couple", ["Ana", "Ben"])
    other = prompts.session_system("couple", ["Kim", "Lee"])
    shared = common_prefix(one, other)
    assert shared > 0.95 * len(one) and "Ana" not in one[:shared]
    for info in [*label_info("couple", "utterance_type"), *label_info("couple", "strategy")]:
        assert f"- {info.name}: {prompts.first_sentence(info.definition)}" in one[:shared], info.name
    for info in label_info("couple", "strategy"):
        assert f"Use when: {prompts.first_sentence(info.use_when)}" in one[:shared], info.name


def test_label_lines_keep_each_definitions_first_sentence_only():
    """The shared prefix every call reads: each label's defining sentence and its use-when
    cue, not the elaborations and "not when" contrasts after them."""
    info = next(i for i in label_info("couple", "strategy") if i.name == "counterbalance")
    text = prompts.session_system("couple", ["Ana", "Ben"])
    assert prompts.first_sentence(info.definition) in text and info.definition not in text
    assert info.not_when not in text and "Not when" not in text
    assert prompts.first_sentence("Asks 'why?' of them. Then more.") == "Asks 'why?' of them."
    assert prompts.first_sentence("One sentence only") == "One sentence only"
    first = prompts.annotator_messages("couple", ["Ana", "Ben"], "x", None)[0]["content"]
    second = prompts.annotator_messages("couple", ["Kim", "Lee"], "y", "blame")[0]["content"]
    assert first == second, "the annotator's system prompt names no one"


@pytest.mark.parametrize("window", [1, 4, 16])
def test_the_newest_line_is_always_shown(window):
    block = prompts.transcript_block(LINES, window)
    assert block.endswith(LINES[-1]) and ("earlier turns" in block) == (prompts.window_start(len(LINES), window) > 0)
