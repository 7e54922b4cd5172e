"""Request data shared by the LLM tests (a module of its own: ``conftest`` names collide)."""

from __future__ import annotations

from typing import Any

#: A client turn as the LLM backend asks for it (strict-mode shaped).
TURN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "utterance": {"type": "string"},
        "emotion": {"type": "string", "enum": ["anger", "sadness", "hope"]},
        "intensity": {"type": "integer", "minimum": 1, "maximum": 10},
    },
    "required": ["utterance", "emotion", "intensity"],
    "additionalProperties": False,
}

MESSAGES: list[dict[str, str]] = [
    {"role": "system", "content": "You are Ana, in couple therapy with Ben."},
    {"role": "user", "content": "Therapist: How did that make you feel?"},
]
