"""Prompts that fit the model: transcript windows shortened to the context, counted by the
server's tokenizer where it has one, and reply budgets sized per role."""

from __future__ import annotations

import pytest
from llm_data import TURN_SCHEMA

from rescue_env.llm import prompts, run_sync
from rescue_env.llm.capabilities import grammar_schema
from rescue_env.llm.tokens import Prompt, TokenCounter, reply_budget

LINES = [prompts.line("Ana" if i % 2 else "Ben", "Therapist", f"turn {i}: " + "I keep saying the same thing " * 8) for i in range(40)]


def transcript_messages(window: int) -> list[dict[str, str]]:
    return prompts.session_messages("couple", ["Ana", "Ben"], LINES, window, prompts.persona_tail("Ana", "a partner", "calm", "Your turn.", "Couple"))


#: A context that holds the shared instructions and about half of the 40 lines, with room for
#: a reply, not all of them (from the prompt itself: it follows the instructions' length)
CONTEXT = TokenCounter(None, "mock").estimate(transcript_messages(20)) + 400


def transcript_prompt(window: int = 40, min_window: int = 1) -> Prompt:
    return Prompt(transcript_messages, window, min_window)


def shown_turns(request) -> list[str]:
    return [line for line in request.body["messages"][1]["content"].splitlines() if ": turn " in line]


@pytest.mark.parametrize("flavour", ["llama_cpp", "openai"])
def test_a_long_transcript_is_trimmed_to_the_context(serve, client_for, flavour):
    """The oldest lines go; the newest stay; the prompt and the reply budget fit the context."""
    server = serve(flavour=flavour)
    client = client_for(server, context_tokens=CONTEXT, structured_outputs="json_object_schema" if flavour == "llama_cpp" else "auto")
    result = run_sync(client.complete_json(transcript_prompt(), TURN_SCHEMA, name="client_turn"))
    assert result.ok
    call = server.chat_requests[-1]
    turns = shown_turns(call)
    assert 1 <= len(turns) < 40 and turns[-1].startswith("Ana (to Therapist): turn 39"), "the newest lines are kept"
    assert "earlier turns" in call.body["messages"][1]["content"]
    assert client.tokens.estimate(call.body["messages"]) + call.body["max_tokens"] <= CONTEXT * 1.1
    assert client.usage().trimmed == 1 and client.usage_by_role()["client_turn"].trimmed == 1
    # llama-cpp-python's tokenizer is used where there is one; elsewhere the estimate
    assert client.tokens.endpoint == ("llama_cpp" if flavour == "llama_cpp" else "estimate")


def test_a_prompt_that_fits_is_sent_whole(serve, client_for):
    server = serve()
    client = client_for(server, context_tokens=32000)
    assert run_sync(client.complete_json(transcript_prompt(), TURN_SCHEMA, name="client_turn")).ok
    assert len(shown_turns(server.chat_requests[-1])) == 40 and client.usage().trimmed == 0


def test_a_prompt_that_cannot_fit_fails_with_the_reason(serve, client_for):
    server = serve()
    client = client_for(server, context_tokens=200)
    result = run_sync(client.complete_json(transcript_prompt(min_window=5), TURN_SCHEMA, name="client_turn"))
    assert not result.ok and "does not fit the model's context of 200 tokens" in result.error
    assert "llm.context_tokens" in result.error
    assert server.chat_requests == [], "nothing is sent that the server would refuse"


def test_the_estimate_learns_the_servers_tokens_per_character():
    counter = TokenCounter(None, "m")
    messages = [{"role": "user", "content": "x" * 4000}]
    before = counter.estimate(messages)
    counter.observe(messages, 1000 + 6)  # the server said ~4 characters a token
    assert counter.estimate(messages) < before
    assert counter.estimate(messages) == pytest.approx(1006, rel=0.01)


def test_reply_budgets_follow_the_role_schema():
    """A client turn asks for a few hundred tokens; a larger group's turn (more stances) for more."""
    couple = reply_budget(grammar_schema(prompts.client_turn_schema(["Ben"], ["therapist", "Ben", "both of you"])))
    family = reply_budget(grammar_schema(prompts.client_turn_schema(["A", "B", "C"], ["therapist", "A", "family"])))
    pattern = reply_budget(grammar_schema(prompts.pattern_schema("couple")))
    assert pattern < couple < family
    assert couple < 512, "a client turn does not need the config's 512 tokens"


def test_a_runaway_string_is_ended_by_its_bound_before_the_budget():
    """A string of digits takes one token a character: the budget still holds the longest
    string at its maxLength and the rest of the reply, so the grammar closes the JSON."""
    schema = grammar_schema(prompts.therapist_move_schema(["Ana", "Ben", "Ana & Ben"], ["validate", "reframe"]))
    longest = max(p.get("maxLength", 0) for p in schema["properties"].values())
    others = sum(p.get("maxLength", 12) for p in schema["properties"].values()) - longest
    assert reply_budget(schema) >= longest + others / 3
