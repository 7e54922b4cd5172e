"""The mock server as users script it: default instances, fault schedules, recording."""

from __future__ import annotations

import random

import jsonschema
import openai
import pytest

from rescue_env.llm.mock_server import Faults, MockLLMServer, schema_instance, schema_responder

SCHEMAS = [
    {"type": "object", "properties": {}},
    {
        "type": "object",
        "properties": {
            "label": {"enum": ["pursue_withdraw", "attack_attack"]},
            "valence": {"type": "number", "minimum": -1, "maximum": 1},
            "stances": {"type": "array", "minItems": 2, "items": {"$ref": "#/$defs/stance"}},
            "reason": {"type": ["string", "null"], "minLength": 5},
            "speak": {"type": "boolean"},
            "target": {"anyOf": [{"type": "integer", "minimum": 1}, {"const": "Couple"}]},
        },
        "required": ["label", "valence", "stances", "reason", "speak", "target"],
        "additionalProperties": False,
        "$defs": {
            "stance": {"type": "object", "properties": {"toward": {"type": "string"}}, "required": ["toward"]},
        },
    },
]


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("rng", [None, random.Random(0)])
def test_schema_instance_is_valid(schema, rng):
    jsonschema.validate(schema_instance(schema, rng), schema)


def test_seeded_responder_varies_enum_choices_reproducibly():
    schema = {"type": "object", "properties": {"label": {"enum": list("abcdefgh")}}}
    request = {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}

    def labels(seed: int) -> list[str]:
        respond = schema_responder(seed)
        return [respond(request)["label"] for _ in range(20)]

    assert labels(0) == labels(0) and len(set(labels(0))) > 1
    assert {schema_responder()(request)["label"]} == {"a"}


def test_openai_sdk_lists_models_and_requests_are_recorded():
    with MockLLMServer(model="tiny") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)
        models = client.models.list()
        assert [m.id for m in models.data] == ["tiny"]
        assert server.requests[0].method == "GET" and server.chat_requests == []


def test_fault_schedule_then_rates_are_deterministic():
    faults = Faults(schedule=["server_error", None], rates={"rate_limit": 0.5}, seed=1)

    def run() -> list:
        with MockLLMServer(faults=faults) as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)
            for _ in range(12):
                try:
                    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
                except openai.APIStatusError:
                    pass
            return [r.fault for r in server.chat_requests]

    kinds = run()
    assert kinds[:2] == ["server_error", None] and set(kinds[2:]) == {"rate_limit", None}
    assert kinds == run()


def test_a_request_meets_at_most_max_in_a_row_faults_then_is_answered():
    faults = Faults(rates={"server_error": 1.0}, max_in_a_row=2)
    with MockLLMServer(faults=faults) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0)
        outcomes = []
        for content in ["hi", "hi", "hi", "hi", "other"]:
            try:
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": content}])
                outcomes.append("ok")
            except openai.InternalServerError:
                outcomes.append("500")
    # the same body: two faults, then an answer, then the streak starts again; a new body has its own
    assert outcomes == ["500", "500", "ok", "500", "500"]


def test_bad_fault_config_names_the_kinds():
    with pytest.raises(ValueError, match="unknown fault kinds"):
        Faults(schedule=["timeout"])  # type: ignore[list-item]
