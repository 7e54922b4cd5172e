"""End to end through the real LLM layer: ``rescue_env.llm.LLMClient`` → HTTP → the loopback
``MockLLMServer``, whose replies come from the calibrated fake judge (or a drifting one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from judge_fakes import FakeJudgeClient, write_rollout

import rescue_env.experiments.judge as app

mock_server = pytest.importorskip("rescue_env.llm.mock_server")
CONF = str(Path(app.__file__).resolve().parents[1] / "conf")


def _cfg(overrides: list[str]):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose(config_name="judge", overrides=overrides)


def test_all_modes_against_the_loopback_server(tmp_path: Path) -> None:
    run = write_rollout(tmp_path / "run", n_seeds=1)
    fake = FakeJudgeClient()
    with mock_server.MockLLMServer(responder=fake.server_responder()) as server:
        cfg = _cfg([f"run_dir={run}", "scorer=llm", "modes=[absolute,pairwise,twins]", "progress=false",
                    f"llm.base_url={server.base_url}", "llm.model=mock-judge", "llm.max_retries=0",
                    "batch_size=8", "twins.generator=llm", "twins.items_per_agent=2",
                    "temperature=0.3", "llm.temperature=0.9"])
        app.run(cfg)  # builds its own LLMClient from the llm group
        bodies = [r.body for r in server.chat_requests]
    summary = json.loads((run / "judge_summary.json").read_text())
    assert summary["scorer"] == "llm" and summary["judge_model"] == "mock-judge"
    # every request carried a JSON Schema and the judge's own fixed temperature (not the llm group's)
    assert bodies and all(b["response_format"]["type"] == "json_schema" for b in bodies)
    assert all(b["temperature"] == 0.3 for b in bodies) and summary["temperature"] == 0.3
    ab = summary["absolute"]
    assert ab["failed"] == 0 and ab["veto_count"] == 1 and ab["anchors"]["n_flagged"] == 0
    vetoed = [json.loads(x) for x in (run / "judgements.jsonl").read_text().splitlines()]
    vetoed = [r for r in vetoed if r["mode"] == "absolute" and r.get("kind") == "item" and r["veto"]]
    assert len(vetoed) == 1 and vetoed[0]["overall"] == 0.0
    pw = summary["pairwise"]
    names = [b["response_format"]["json_schema"]["name"] for b in bodies]
    assert names.count("support_quality_pairwise") == 2 * pw["n_pairs"] > 0  # both orders
    assert pw["position_bias"]["consistency"] == 1.0
    assert names.count("perturbed_twins") > 0 and summary["twins"]["per_agent"]
    assert summary["llm_usage"]["judge:absolute"]


def test_drifting_server_is_flagged(tmp_path: Path) -> None:
    run = write_rollout(tmp_path / "run", n_seeds=1, episodes=1)
    # 8 items + 2 anchors per batch; the server turns lenient after the first batch
    fake = FakeJudgeClient(drift_after=10, drift=2)
    with mock_server.MockLLMServer(responder=fake.server_responder()) as server:
        cfg = _cfg([f"run_dir={run}", "scorer=llm", "progress=false", f"llm.base_url={server.base_url}",
                    "llm.max_concurrency=1", "llm.max_retries=0", "batch_size=8", "anchors_per_batch=2"])
        app.run(cfg)
    anchors = json.loads((run / "judge_summary.json").read_text())["absolute"]["anchors"]
    flags = [b["flagged"] for b in anchors["batches"]]
    assert flags[0] is False and all(flags[1:]) and len(flags) > 1
    assert anchors["n_flagged"] == len(flags) - 1
    records = [json.loads(x) for x in (run / "judgements.jsonl").read_text().splitlines()]
    items = [r for r in records if r["mode"] == "absolute" and r.get("kind") == "item"]
    assert any(r["batch_flagged"] for r in items) and not all(r["batch_flagged"] for r in items)
