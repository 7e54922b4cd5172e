"""``python -m rescue_env.llm._serve_local PARENT_PID ARGS...``: ``llama_cpp.server`` with ARGS,
exiting as soon as process PARENT_PID is gone (a killed ``rescue`` leaves no server behind),
and with its RAM prompt cache held to ``--cache_size``.

llama-cpp-python 0.3's ``LlamaRAMCache`` evicts when the sum of the saved llama states passes
its capacity, but every saved state also carries a copy of the logits buffer
(``n_batch × n_vocab`` floats: 100 MB for SmolLM2) and the token ids, which that sum leaves
out: the cache of a 7-step rollout with LLM clients, annotator and therapist grew to 19.6 GB
and the machine's OOM killer took the server. Counting every array a state holds makes the
capacity a bound on the memory the cache really uses.
"""

from __future__ import annotations

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


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


if __name__ == "__main__":
    parent_pid = int(sys.argv[1])
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    _count_whole_states()
    sys.argv = ["llama_cpp.server", *sys.argv[2:]]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
