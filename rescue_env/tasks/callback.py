"""An SB3 callback that scores the policy being trained on the static tasks.

Every ``eval_freq`` calls it wraps the current model as a therapist agent, answers ITP,
STP and SSP (and RPP when a pattern classifier is given) on held-out real or seed
dialogues through state extraction, and logs the figures under ``tasks/…`` tags
(``tasks/itp_f1``, ``tasks/stp_recall_at_1``, ``tasks/ssp_mrr``…), so training can be
watched against the real therapists' choices.

    from rescue_env.agents.sb3 import SB3Agent
    from rescue_env.tasks.callback import TaskEvalCallback

    policy = lambda model, scenario: SB3Agent(model, scenario, deterministic=True, name="policy")
    model.learn(100_000, callback=TaskEvalCallback(heldout, "couple", agent_factory=policy, eval_freq=1_000))
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

from stable_baselines3.common.callbacks import BaseCallback

from rescue_env.data.schema import Dialogue
from rescue_env.tasks.instances import GENERATIVE_TASKS, check_profile, check_task
from rescue_env.tasks.predictors import AgentPredictor, PatternClassifier
from rescue_env.tasks.runner import evaluate

log = logging.getLogger(__name__)

#: Figures logged per task (all in [0, 1]).
LOGGED: dict[str, tuple[str, ...]] = {
    "itp": ("f1", "precision", "recall", "accuracy"),
    "rpp": ("accuracy", "mrr", "macro_f1"),
    "stp": ("recall_at_1", "recall_at_3", "mrr"),
    "ssp": ("recall_at_1", "recall_at_3", "mrr"),
}


class TaskEvalCallback(BaseCallback):
    """Logs static-task figures of the training policy every ``eval_freq`` calls.

    Args:
        dialogues: held-out dialogues (real or seeds); only those of ``scenario`` are used.
        scenario: the scenario the policy is trained on (``couple`` or ``family``); ``None``
            uses every dialogue.
        eval_freq: calls of the callback between evaluations (one call per vectorised env
            step, i.e. ``n_envs`` timesteps); ``0`` evaluates only at the end of training.
        tasks: among ``itp``, ``stp``, ``ssp``, ``rpp`` (``rpp`` needs ``pattern_classifier``:
            the policy itself predicts no pattern).
        profile: ``paper`` or ``released`` instance sets.
        agent_factory: ``(model, scenario) -> agent`` of the agent protocol (e.g. the
            project's ``rescue_env.agents.sb3.SB3Agent``; ``rescue_env`` does not import the agents).
        pattern_classifier: RPP's classifier (e.g. the calibrated simulator's).

    The last figures are kept in :attr:`last_results` (the ``tasks.json`` layout).
    """

    def __init__(
        self,
        dialogues: Sequence[Dialogue],
        scenario: str | None = None,
        *,
        agent_factory: Callable[[Any, str], Any],
        eval_freq: int = 10_000,
        tasks: Sequence[str] = ("itp", "stp", "ssp"),
        profile: str = "paper",
        pattern_classifier: PatternClassifier | None = None,
        verbose: int = 0,
    ):
        super().__init__(verbose)
        self.tasks = [check_task(t) for t in tasks]
        bad = [t for t in self.tasks if t in GENERATIVE_TASKS]
        if bad:
            raise ValueError(f"{bad} need a generative predictor; the callback logs itp, stp, ssp and rpp")
        if "rpp" in self.tasks and pattern_classifier is None:
            raise ValueError("rpp needs a pattern_classifier (the policy predicts no relation pattern)")
        self.profile = check_profile(profile)
        self.dialogues = [d for d in dialogues if scenario is None or d.scenario == scenario]
        if not self.dialogues:
            raise ValueError(f"no held-out dialogue of scenario {scenario!r} to evaluate on")
        self.scenario = scenario
        self.eval_freq = int(eval_freq)
        self.agent_factory = agent_factory
        self.pattern_classifier = pattern_classifier
        self.last_results: dict[str, Any] = {}

    def evaluate_now(self) -> dict[str, Any]:
        """Score the current policy, log the figures, return the results."""
        model = self.model
        predictor = AgentPredictor(lambda scenario: self.agent_factory(model, scenario), name="policy", pattern_classifier=self.pattern_classifier)
        results = evaluate(self.dialogues, self.tasks, predictor, self.profile)
        for task, res in results.items():
            if "skipped" in res:
                continue
            for key in LOGGED.get(task, ()):
                if key in res:
                    self.logger.record(f"tasks/{task}_{key}", float(res[key]))
            self.logger.record(f"tasks/{task}_failed", int(res["failed"]))
        if self.verbose:
            log.info("tasks at %d steps: %s", self.num_timesteps, {t: round(r.get(LOGGED[t][0], 0.0), 4) for t, r in results.items() if "skipped" not in r})
        self.last_results = results
        return results

    def _on_step(self) -> bool:
        if self.eval_freq > 0 and self.n_calls % self.eval_freq == 0:
            self.evaluate_now()
        return True

    def _on_training_end(self) -> None:
        if self.eval_freq <= 0:
            self.evaluate_now()
