"""``python -m rescue_env.llm._serve_local PARENT_PID ARGS...``: ``llama_cpp.server`` with ARGS,
exiting as soon as process PARENT_PID is gone (a killed ``rescue`` leaves no server behind),
with its RAM prompt cache held to ``--cache_size``, and with each chat reply telling what the
prompt cost.

Reply timings: llama-cpp-python 0.3's server reports only ``usage.prompt_tokens`` (the whole
prompt), not how much of it was found already evaluated (its context or its prompt cache). Each
non-streamed chat reply here also carries ``usage.prompt_tokens_details.cached_tokens`` (as
OpenAI and vLLM report it) and ``timings`` in the shape of llama.cpp's own server
(``cache_n``, ``prompt_n`` evaluated, ``prompt_ms``, ``predicted_n``, ``predicted_ms``), so the
client can account evaluated prompt tokens and generation speed per call.

llama-cpp-python 0.3's ``LlamaRAMCache`` evicts when the sum of the saved llama states passes
its capacity, but every saved state also carries a copy of the logits buffer
(``n_batch × n_vocab`` floats: 100 MB for SmolLM2) and the token ids, which that sum leaves
out: the cache of a 7-step rollout with LLM clients, annotator and therapist grew to 19.6 GB
and the machine's OOM killer took the server. Counting every array a state holds makes the
capacity a bound on the memory the cache really uses.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
import time


def _count_whole_states() -> None:
    from llama_cpp.llama_cache import LlamaRAMCache

    def cache_size(self: LlamaRAMCache) -> int:
        return sum(state.llama_state_size + state.scores.nbytes + state.input_ids.nbytes for state in self.cache_state.values())

    LlamaRAMCache.cache_size = property(cache_size)  # type: ignore[assignment]


def _report_timings() -> None:
    """Add ``timings`` and ``usage.prompt_tokens_details`` to each non-streamed chat reply."""
    from llama_cpp import llama_types
    from llama_cpp.llama import Llama

    generate, chat = Llama.generate, Llama.create_chat_completion

    def timed_generate(self: Llama, tokens, *args, **kwargs):  # type: ignore[no-untyped-def]
        # the prefix generate() keeps is the one it matches here (the last token is always evaluated)
        cached = Llama.longest_token_prefix(self._input_ids.tolist(), tokens[:-1]) if kwargs.get("reset", True) and self.n_tokens else 0
        timings = self._rescue_timings = {"cache_n": cached, "prompt_n": len(tokens) - cached, "prompt_ms": 0.0, "predicted_n": 0, "predicted_ms": 0.0}
        start = first = time.perf_counter()
        try:
            for token in generate(self, tokens, *args, **kwargs):
                if timings["predicted_n"] == 0:
                    first = time.perf_counter()
                    timings["prompt_ms"] = (first - start) * 1000  # evaluation and the first sample
                timings["predicted_n"] += 1
                yield token
        finally:
            timings["predicted_ms"] = (time.perf_counter() - first) * 1000

    def reported_chat(self: Llama, *args, **kwargs):  # type: ignore[no-untyped-def]
        self._rescue_timings = None
        reply = chat(self, *args, **kwargs)
        timings = getattr(self, "_rescue_timings", None)
        if isinstance(reply, dict) and timings is not None:
            reply["timings"] = dict(timings)
            reply.setdefault("usage", {})["prompt_tokens_details"] = {"cached_tokens": timings["cache_n"]}
            print(f"reply timings: {json.dumps(timings)}", file=sys.stderr, flush=True)  # the server's log
        return reply

    Llama.generate = timed_generate  # type: ignore[method-assign]
    Llama.create_chat_completion = reported_chat  # type: ignore[method-assign]
    # the server's response model would drop keys its TypedDicts do not name
    for kind in (llama_types.CreateChatCompletionResponse, llama_types.CompletionUsage):
        kind.__pydantic_config__ = {"extra": "allow"}  # type: ignore[attr-defined]


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


if __name__ == "__main__":
    parent_pid = int(sys.argv[1])
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    _count_whole_states()
    _report_timings()
    sys.argv = ["llama_cpp.server", *sys.argv[2:]]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
