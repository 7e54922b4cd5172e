"""The LLM judge against fake async clients: absolute, vetoes, anchor drift, repeats,
pairwise in both orders with a position-bias report, and perturbed twins."""

from __future__ import annotations

import asyncio

import pytest
from judge_fakes import DEMEANING, POOR, FakeJudgeClient, make_episodes

from rescue_env.data import load_dialogues
from rescue_env.judges.items import items_from_dialogues, pair_moments
from rescue_env.judges.llm_judge import (
    ABSOLUTE_NAME,
    PAIRWISE_NAME,
    JudgeSettings,
    LLMJudge,
    length_score_correlation,
    position_bias_report,
)
from rescue_env.judges.offline import OfflineScorer
from rescue_env.judges.config import JudgeConfig, TwinsConfig
from rescue_env.judges.pipeline import run_judge
from rescue_env.judges.twins import LLMResponder, LLMTwinGenerator, RecordedResponder, TemplateTwinGenerator, run_twins


@pytest.fixture(scope="module")
def episodes():
    return make_episodes(load_dialogues()[:2], episodes=2)


@pytest.fixture(scope="module")
def items(episodes):
    return items_from_dialogues(episodes)


def run(coro):
    return asyncio.run(coro)


def test_absolute_mixes_anchors_into_every_batch_and_counts_vetoes(items) -> None:
    client = FakeJudgeClient()
    judge = LLMJudge(client, JudgeSettings(batch_size=10, anchors_per_batch=2))
    res = run(judge.judge_items(items))
    n_batches = -(-len(items) // 10)
    assert len(res.judgements) == len(items) and len(res.batches) == n_batches
    assert len(res.anchor_judgements) == 2 * n_batches
    assert client.absolute_calls == len(items) + 2 * n_batches
    assert all(c["name"] == ABSOLUTE_NAME and c["schema"]["properties"]["scores"] for c in client.calls)
    # a calibrated judge: anchors come back as expected, nothing flagged
    assert not res.flagged_batches and all(b.anchor_mae == 0 for b in res.batches)
    vetoed = [(i, j) for i, j in zip(items, res.judgements) if j.veto]
    assert vetoed and all(i.response == DEMEANING and j.overall == 0 for i, j in vetoed)
    assert all(j.scorer == "llm" for j in res.judgements)


def test_anchor_drift_is_detected(items) -> None:
    # 10 items + 2 anchors per batch = 12 calls; the server drifts after the first batch
    client = FakeJudgeClient(drift_after=12, drift=2)
    res = run(LLMJudge(client, JudgeSettings(batch_size=10, anchors_per_batch=2, anchor_tolerance=0.75)).judge_items(items))
    assert not res.batches[0].flagged
    assert all(b.flagged for b in res.batches[1:])
    assert all(b.anchor_bias > 0.75 for b in res.batches[1:])  # drifted toward leniency
    assert "anchor MAE" in res.batches[1].reason


def test_failed_calls_are_counted_not_averaged(episodes) -> None:
    client = FakeJudgeClient(fail_texts=(POOR,))
    cfg = JudgeConfig(scorer="llm", modes=["absolute"], batch_size=8, progress=False)
    out = run(run_judge(episodes, cfg, client))
    poor = out.summary["absolute"]["per_agent"]["poor"]
    recs = [r for r in out.records if r["mode"] == "absolute" and r.get("kind") == "item" and r["agent"] == "poor"]
    failed = [r for r in recs if not r["ok"]]
    assert len(failed) == sum(1 for r in recs if r["response"] == POOR) == poor["failed"] > 0
    assert all(r["overall"] is None and "server error" in r["error"] for r in failed)
    ok = [r["overall"] for r in recs if r["ok"]]
    assert poor["overall_mean"] == pytest.approx(sum(ok) / len(ok), abs=1e-3)  # failures left out
    assert poor["veto_count"] == 2 and poor["n"] == len(recs)


def test_repeats_average_the_most_variable_items(items) -> None:
    client = FakeJudgeClient(noise=True)
    settings = JudgeSettings(batch_size=16, anchors_per_batch=1, repeats=2, repeat_items=3, anchor_tolerance=3)
    res = run(LLMJudge(client, settings).judge_items(items[:12]))
    chosen = [r["item_id"] for r in res.repeats["repeated"]]
    assert len(chosen) == 3
    by_id = {j.item_id: j for j in res.judgements}
    assert all(by_id[i].n_samples == 4 for i in chosen)  # probe pair + 2 repeats
    assert all(j.n_samples == 2 for j in res.judgements if j.item_id not in chosen)
    seeds = {c["seed"] for c in client.calls}
    assert seeds == {0, 1, 2, 3}


def test_pairwise_asks_both_orders_and_reports_position_bias(episodes) -> None:
    pairs = pair_moments(episodes, "heuristic", "poor")
    assert pairs and all(p.exact for p in pairs)
    fair = FakeJudgeClient()
    outcomes = run(LLMJudge(fair).compare_many(pairs))
    calls = [c for c in fair.calls if c["name"] == PAIRWISE_NAME]
    assert len(calls) == 2 * len(pairs)
    # the two calls of a pair show the replies in swapped positions
    first, second = calls[0]["messages"][-1]["content"], calls[1]["messages"][-1]["content"]
    a_text, b_text = pairs[0].a.response, pairs[0].b.response
    assert first.index(a_text) < first.index(b_text) and second.index(b_text) < second.index(a_text)
    assert all(o.consistent and o.winner == "heuristic" for o in outcomes)

    biased = FakeJudgeClient(position_bias="A")
    outcomes = run(LLMJudge(biased).compare_many(pairs))
    assert all(not o.consistent and o.winner == "tie" for o in outcomes)
    report = position_bias_report(outcomes)
    assert report["first_position_share"] == 1.0 and report["consistency"] == 0.0
    assert report["first_wins_both"] == len(pairs) and report["binomial_p"] < 0.05


def test_twins_with_llm_generator_and_responder(items) -> None:
    client = FakeJudgeClient()
    judge = LLMJudge(client, JudgeSettings(anchors_per_batch=1))
    chosen = [i for i in items if i.trigger is not None][:3]
    records, summary = run(run_twins(chosen, LLMTwinGenerator(client), LLMResponder(client), judge.score))
    assert len(records) == 6 and {r.role for r in records} == {"event", "emotion"}
    event = [r for r in records if r.role == "event"]
    assert all("crashed" in r.twin_trigger for r in event)
    # the fake therapist says the same thing whatever happened: a template answer
    assert all(r.similarity == 1.0 and r.template_like for r in records)
    assert all(r.gap is not None for r in records)
    agent = chosen[0].agent
    assert summary[agent]["event"]["template_share"] == 1.0


def test_template_twins_keep_the_feeling_and_swap_the_event(items) -> None:
    it = next(i for i in items if i.trigger is not None and i.trigger_emotion)
    ts = run(TemplateTwinGenerator(seed=1).generate(it))
    assert ts.event.trigger.text != it.trigger.text and ts.event.trigger_emotion == it.trigger_emotion
    assert ts.emotion.trigger_emotion != it.trigger_emotion
    assert ts.event.trigger in ts.event.context and it.trigger not in ts.event.context
    offline = OfflineScorer()

    async def score(xs):
        return offline.judge_many(xs)

    records, _ = run(run_twins([it], TemplateTwinGenerator(), RecordedResponder(), score))
    assert all(r.similarity == 1.0 and r.reply == it.response for r in records)


def test_length_score_correlation() -> None:
    c = length_score_correlation([1, 2, 3, 4], [0.5, 1.0, 1.5, 2.0])
    assert c["pearson"] == pytest.approx(1.0) and c["spearman"] == pytest.approx(1.0) and c["n"] == 4
    assert length_score_correlation([1, 2], [1, 2])["pearson"] is None


def test_pipeline_all_modes_with_llm_scorer(episodes) -> None:
    client = FakeJudgeClient()
    cfg = JudgeConfig(scorer="llm", modes=["absolute", "pairwise", "twins"], batch_size=12, model="fake-model",
                      twins=TwinsConfig(items_per_agent=2), progress=False)
    out = run(run_judge(episodes, cfg, client))
    s = out.summary
    assert s["scorer"] == "llm" and s["judge_model"] == "fake-model"
    assert s["absolute"]["veto_count"] == 2 and s["absolute"]["anchors"]["n_flagged"] == 0
    assert s["pairwise"]["position_bias"]["applicable"] and s["pairwise"]["n_pairs"] == 4
    # "never" only has the session opening, which answers no client turn: no twins
    assert set(s["twins"]["per_agent"]) == {"heuristic", "poor"}
    modes = {r["mode"] for r in out.records}
    assert modes == {"absolute", "pairwise", "twins"}
    assert all(r["scorer"] == "llm" for r in out.records)


def test_llm_scorer_without_client_is_a_clear_error(episodes) -> None:
    with pytest.raises(ValueError, match="no client"):
        run(run_judge(episodes, JudgeConfig(scorer="llm"), None))
    with pytest.raises(ValueError, match="modes"):
        JudgeConfig(modes=["absolute", "vibes"]).check()
