"""The async LLM client layer: one ``LLMClient`` over ``openai.AsyncOpenAI`` for every
LLM call (client personas, annotator, therapist, judges), configured by ``LLMConfig``.

``rescue_env.llm.mock_server.MockLLMServer`` is a loopback Chat Completions server with
fault injection for testing code that uses the client without a real model.
"""

from rescue_env.llm.cache import ResponseCache
from rescue_env.llm.client import LLMClient, LLMResult, run_sync
from rescue_env.llm.config import LLMConfig
from rescue_env.llm.usage import Usage, UsageStats

__all__ = ["LLMClient", "LLMConfig", "LLMResult", "ResponseCache", "Usage", "UsageStats", "run_sync"]
