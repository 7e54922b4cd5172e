"""The SB3 callback logs tasks/… figures of the policy on held-out dialogues."""

from __future__ import annotations

import pytest

pytest.importorskip("stable_baselines3")

from rescue_env.tasks import CarryForwardPatternClassifier  # noqa: E402
from rescue_env.tasks.callback import TaskEvalCallback  # noqa: E402


class Logger:
    def __init__(self):
        self.records: dict[str, float] = {}

    def record(self, key, value, exclude=None):
        self.records[key] = value


class FakeModel:
    """What BaseCallback reads from a model: its logger and timestep count."""

    def __init__(self):
        self.logger = Logger()
        self.num_timesteps = 0

    def get_env(self):
        return None


def test_logs_task_figures_every_eval_freq(seeds, stub_agent):
    built = []

    def factory(model, scenario):
        built.append(scenario)
        return stub_agent

    cb = TaskEvalCallback(seeds, "couple", eval_freq=2, agent_factory=factory)
    model = FakeModel()
    cb.init_callback(model)
    assert cb.on_step() is True and model.logger.records == {}  # call 1: not yet
    cb.on_step()  # call 2: evaluates
    rec = model.logger.records
    for key in ("tasks/itp_f1", "tasks/itp_recall", "tasks/stp_recall_at_1", "tasks/stp_mrr", "tasks/ssp_recall_at_1", "tasks/ssp_failed"):
        assert key in rec
    assert 0.0 <= rec["tasks/itp_f1"] <= 1.0 and rec["tasks/ssp_failed"] == 0
    assert set(built) == {"couple"}
    assert all(r["n"] > 0 for r in cb.last_results.values())
    assert {d.scenario for d in cb.dialogues} == {"couple"}


def test_rpp_needs_a_pattern_classifier_and_er_is_refused(seeds, stub_agent):
    with pytest.raises(ValueError, match="pattern_classifier"):
        TaskEvalCallback(seeds, "family", tasks=["rpp"], agent_factory=lambda m, s: stub_agent)
    with pytest.raises(ValueError, match="generative"):
        TaskEvalCallback(seeds, tasks=["er"], agent_factory=lambda m, s: stub_agent)
    with pytest.raises(ValueError, match="no held-out dialogue"):
        TaskEvalCallback([d for d in seeds if d.scenario == "couple"], "family", agent_factory=lambda m, s: stub_agent)
    cb = TaskEvalCallback(seeds, "family", eval_freq=0, tasks=["rpp"], agent_factory=lambda m, s: stub_agent,
                          pattern_classifier=CarryForwardPatternClassifier().fit(seeds))
    model = FakeModel()
    cb.init_callback(model)
    cb.on_training_end()  # eval_freq 0: evaluated once at the end
    assert "tasks/rpp_accuracy" in model.logger.records
