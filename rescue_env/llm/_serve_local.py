"""``python -m rescue_env.llm._serve_local PARENT_PID ARGS...``: ``llama_cpp.server`` with ARGS,
exiting as soon as process PARENT_PID is gone (a killed ``rescue`` leaves no server behind)."""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


if __name__ == "__main__":
    parent_pid = int(sys.argv[1])
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    sys.argv = ["llama_cpp.server", *sys.argv[2:]]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
