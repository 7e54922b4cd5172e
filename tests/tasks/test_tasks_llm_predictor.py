"""LLM predictor and judges against a fake async client (and the loopback mock server)."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass
from typing import Any, Callable

import pytest

from rescue_env.tasks import (
    TASKS,
    LLMJudge,
    LLMPredictor,
    build_instances,
    read_details,
    run_tasks,
)

FORBIDDEN_HINTS = ("pos_after", "neg_after", "__pos", "__neg", "actual_therapist_entry", "continue_listening", "boundary_type", "candidate_type", "therapist_entry")


@dataclass
class Result:
    ok: bool
    data: dict | None
    error: str = ""


def answer(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """A well-formed reply to one of the task or judge requests, for every id asked."""
    key = next(iter(schema["properties"]))
    item_schema = schema["properties"][key]["items"]["properties"]
    ids = item_schema["id"]["enum"]

    def one(iid: str) -> dict[str, Any]:
        if name == "task_itp":
            return {"id": iid, "should_speak": "yes", "confidence": 0.7}
        if name in ("task_rpp", "task_stp", "task_ssp"):
            field = next(k for k in item_schema if k != "id")
            return {"id": iid, field: item_schema[field]["items"]["enum"][:3]}
        if name == "task_er":
            return {"id": iid, "emotion": "feels hurt and unheard", "intensity": 6}
        if name == "task_vp":
            return {"id": iid, "viewpoints": [{"source": "", "target": "partner", "viewpoint": "does not listen"}]}
        if name == "judge_er":
            return {"id": iid, "emotion_score": 4, "verdict": "close"}
        if name == "judge_vp":
            return {"id": iid, "source_target_score": 1, "viewpoint_score": 2, "total_score": 3, "verdict": "partial"}
        raise AssertionError(name)

    return {key: [one(i) for i in ids]}


BROKEN = {
    "task_itp": {"should_speak": "maybe"},
    "task_rpp": {"relation_top3": "pursue_withdraw"},
    "task_stp": {"target_top3": None},
    "task_ssp": {"strategy_top3": 3},
    "task_er": {"intensity": 42},
    "task_vp": {"viewpoints": "none"},
    "judge_er": {"emotion_score": 9},
    "judge_vp": {"viewpoint_score": 7},
}


class FakeClient:
    """``complete_json`` that answers from the schema; ``fault(index, name)`` injects
    ``fail`` (ok false), ``raise``, ``missing`` (last item dropped) or ``invalid``."""

    def __init__(self, fault: Callable[[int, str], str | None] | None = None):
        self.fault = fault or (lambda i, n: None)
        self.calls: list[dict[str, Any]] = []

    async def complete_json(self, messages, schema, *, name, seed=None, tag=None):
        idx = len(self.calls)
        self.calls.append({"messages": messages, "schema": schema, "name": name, "seed": seed, "tag": tag})
        await asyncio.sleep(0)
        kind = self.fault(idx, name)
        if kind == "fail":
            return Result(False, None, "HTTP 500 after retries")
        if kind == "raise":
            raise ConnectionError("socket closed")
        data = answer(name, schema)
        key = next(iter(data))
        if kind == "missing":
            data[key] = data[key][:-1]
        elif kind == "invalid":
            data[key][0].update(BROKEN[name])
        return Result(True, data)

    def prompts(self, prefix: str = "task_") -> list[str]:
        return [c["messages"][-1]["content"] for c in self.calls if c["name"].startswith(prefix)]


def _items(prompt: str) -> list[dict]:
    return json.loads(prompt.split("Items:\n", 1)[1])


@pytest.fixture
def small(seeds):
    """One couple and one family seed dialogue."""
    return [next(d for d in seeds if d.scenario == "couple"), next(d for d in seeds if d.scenario == "family")]


def _run(data, client, out, *, judge_client=None, profile="paper", batch_size=3, **kw):
    pred = LLMPredictor(client, batch_size=batch_size, seed=7)
    judge = LLMJudge(judge_client or client, batch_size=4, seed=7)
    return run_tasks(data, TASKS, pred, profile, out, progress=False, judge=judge, bertscore=None, print_table=False, **kw)


def test_all_six_tasks_with_injected_failures_then_resume(small, tmp_path):
    def fault(i: int, name: str) -> str | None:
        return {0: None, 1: "fail", 2: "raise", 3: "missing", 4: "invalid"}.get(i % 9)

    client = FakeClient(fault)
    res = _run(small, client, tmp_path)
    recs = list(read_details(tmp_path / "details.jsonl").values())
    total_failed = 0
    for task in TASKS:
        n = len(build_instances(small, task, "paper"))
        assert res[task]["n"] == n > 0, task  # failures are never dropped
        total_failed += res[task]["failed"]
    assert total_failed > 0
    for r in recs:
        if not r["failed"]:
            continue
        assert r["reason"]
        if r["task"] == "itp":
            assert r["correct"] is False
        elif r["task"] in ("rpp", "stp", "ssp"):
            if r["prediction"] is None:  # a failed prediction is never padded towards gold
                assert r["pos"] == 0 and r["ranked"] is None
        elif r["task"] == "er":
            assert r["emotion_score"] == 1.0
        else:
            assert r["total"] == 0.0
    reasons = " ".join(r["reason"] for r in recs)
    assert "request failed" in reasons and "request raised ConnectionError" in reasons
    # every request carries the seed and a tasks/ tag; ids are opaque and local to a request
    assert all(c["seed"] == 7 and c["tag"].startswith("tasks/") for c in client.calls)
    for prompt in client.prompts():
        ids = [it["id"] for it in _items(prompt)]
        assert ids == [f"i{j}" for j in range(len(ids))]
        for hint in FORBIDDEN_HINTS:
            assert hint not in prompt
    # no annotation (gold) reaches the predictor: no emotion or viewpoint text of the data
    golds = [i.gold["emotion"] for i in build_instances(small, "er", "paper")]
    golds += [v.viewpoint for d in small for row in d.rows for v in row.viewpoints_attitudes]
    golds += [e.emotion_description for d in small for row in d.rows for e in row.internal_emotion]
    task_text = "\n".join(client.prompts())
    assert not [g for g in golds if g and g in task_text]
    # ... while the judge sees gold and prediction side by side
    assert any(golds[0] in p for p in client.prompts("judge_er"))

    again = FakeClient()
    _run(small, again, tmp_path)
    assert again.calls == []  # resumed: nothing is asked again


def test_missing_item_is_asked_again_alone(small, tmp_path):
    client = FakeClient(lambda i, n: "missing" if i == 0 else None)
    pred = LLMPredictor(client, batch_size=3)
    batch = list(build_instances(small, "itp", "paper"))[:3]
    out = asyncio.run(pred.apredict("itp", batch))
    assert [p.value for p in out] == ["yes", "yes", "yes"] and not any(p.failed for p in out)
    assert len(client.calls) == 2 and len(_items(client.calls[1]["messages"][-1]["content"])) == 1


def test_a_retry_that_fails_again_is_a_failure_with_both_reasons(small):
    client = FakeClient(lambda i, n: "invalid")
    pred = LLMPredictor(client, batch_size=2)
    batch = list(build_instances(small, "er", "paper"))[:2]
    out = asyncio.run(pred.apredict("er", batch))
    assert out[0].failed and "intensity 42" in out[0].reason and "retry" in out[0].reason
    assert not out[1].failed and out[1].value == {"emotion": "feels hurt and unheard", "intensity": 6}


def test_answers_are_parsed_per_task(small):
    client = FakeClient()
    pred = LLMPredictor(client, batch_size=4)
    for task in TASKS:
        batch = list(build_instances(small, task, "paper"))[:2]
        out = asyncio.run(pred.apredict(task, batch))
        assert not any(p.failed for p in out), task
    vp = asyncio.run(pred.apredict("vp", list(build_instances(small, "vp", "paper"))[:1]))[0]
    assert vp.value[0]["source"] == build_instances(small, "vp", "paper")[0].context["speaker"]  # empty source -> speaker
    # RPP schema offers the sample's own taxonomy as an enum
    rpp_call = next(c for c in client.calls if c["name"] == "task_rpp")
    enum = rpp_call["schema"]["properties"]["predictions"]["items"]["properties"]["relation_top3"]["items"]["enum"]
    assert enum[0] in ("pursue_withdraw", "escalation_conflict")


def test_judge_failures_are_counted(small, tmp_path):
    judge_client = FakeClient(lambda i, n: "fail")
    res = _run(small, FakeClient(), tmp_path, judge_client=judge_client)
    assert res["er"]["failed"] == res["er"]["n"] and res["er"]["emotion_score"] == 1.0
    assert res["er"]["intensity_match"] > 1.0  # the formula part is still scored
    assert res["vp"]["failed"] == res["vp"]["n"] and res["vp"]["total"] == 0.0
    assert res["itp"]["failed"] == 0
    assert res["er"]["judge"]["kind"] == "llm"


def test_vp_total_is_recomputed_and_judge_total_kept(small, tmp_path):
    res = _run(small, FakeClient(), tmp_path)
    assert res["vp"]["total"] == pytest.approx(3.0) and res["vp"]["judge_total"] == pytest.approx(3.0)
    assert res["er"]["emotion_score"] == pytest.approx(4.0)
    assert res["er"]["s_er"] == pytest.approx((4.0 + res["er"]["intensity_match"]) / 2)


def test_batch_size_must_be_positive():
    with pytest.raises(ValueError, match="batch_size"):
        LLMPredictor(FakeClient(), batch_size=0)


def test_end_to_end_over_loopback_http(small, tmp_path):
    """The real LLM client against the loopback mock server, with faults injected."""
    mock = pytest.importorskip("rescue_env.llm.mock_server")
    from rescue_env.llm import LLMClient, LLMConfig

    def responder(body: dict) -> dict:
        fmt = body["response_format"]["json_schema"]
        return answer(fmt["name"], fmt["schema"])

    faults = mock.Faults(schedule=["server_error", "schema_violation", "schema_violation", "schema_violation", "truncated", "truncated"])
    with mock.MockLLMServer(responder, faults=faults) as server:
        client = LLMClient(LLMConfig(base_url=server.base_url, model="mock", timeout_s=5.0, backoff_initial_s=0.01, backoff_max_s=0.05, max_retries=2))
        res = run_tasks(small, TASKS, LLMPredictor(client, batch_size=4), "paper", tmp_path, progress=False,
                        judge=LLMJudge(client), bertscore=None, print_table=False, concurrency=1)
        n_requests = len(server.chat_requests)
    for task in TASKS:
        assert res[task]["n"] == len(build_instances(small, task, "paper"))
    assert sum(res[t]["failed"] for t in TASKS) >= 1  # a schema violation three times (the answer and llm.reasks=2 re-asks) fails one call
    assert n_requests > 10
    assert re.search(r"llm:mock", json.dumps(res["itp"]["predictor"]))


def test_a_batch_reply_must_answer_every_item():
    """The reply schema asks for one answer per item, so a grammar or strict decoding cannot
    stop short and a short reply from any other server fails validation and is asked again."""
    import jsonschema

    from rescue_env.tasks.llm_predictor import _reply_schema

    schema = _reply_schema("predictions", ["i0", "i1"], {"should_speak": {"type": "string", "enum": ["yes", "no"]}})
    validator = jsonschema.Draft202012Validator(schema)
    both = {"predictions": [{"id": "i0", "should_speak": "yes"}, {"id": "i1", "should_speak": "no"}]}
    assert validator.is_valid(both)
    assert not validator.is_valid({"predictions": both["predictions"][:1]})
    assert not validator.is_valid({"predictions": []})
