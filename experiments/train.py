"""``rescue train``: train an SB3 therapist policy on the simulator.

Reads top to bottom (CleanRL style): config → seeding → data split → vectorised envs →
model (new or resumed) → callbacks (σ* evaluation on held-out seed dialogues,
checkpoints, optional static-task figures) → learn → final model, held-out comparison
with the non-learned agents, ``metrics.json``.

TensorBoard tags: ``charts/`` (episodic return and length, steps per second),
``losses/`` (PPO losses), ``sigma/`` (held-out σ* return, its components, the worst-off
member's final distress). Run name: ``{env_id}__{algo}__{seed}__{time}``.

Examples::

    rescue train env=couple total_timesteps=150000 seed=1
    rescue train -m reward.lam=0,0.5,1 seed=0,1,2          # joblib launcher, 2 jobs at a time
    rescue train resume=outputs/train/.../checkpoints/rl_model_40000_steps.zip
    rescue train experiment=grounded data.path=[...] env.max_members=3   # grounded in real moves

``experiment=grounded`` (the ``prior`` settings; :mod:`rescue_env.agents.grounded`) adds, after the model
is built: the behaviour prior (fitted on the training dialogues or read from ``prior.path``),
behaviour cloning on the real moves, the KL penalty, and in ``metrics.json`` the agreement with
real therapists on the held-out real dialogues beside the σ* margin over the heuristic.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from stable_baselines3.common.callbacks import BaseCallback, CallbackList, CheckpointCallback
from stable_baselines3.common.logger import KVWriter, TensorBoardOutputFormat, configure
from stable_baselines3.common.utils import set_random_seed
from tabulate import tabulate

from rescue_env.agents import make_agent
from rescue_env.agents.sb3 import SB3Agent, algo_class
from rescue_env.experiments import tracking
from rescue_env.experiments.common import load_playable, run_dir
from rescue_env.experiments.config import env_config, register_configs, reward_config
from rescue_env.experiments.errors import ConfigError, user_errors
from rescue_env.atomic import atomic_write_text
from rescue_env.envs.gym_env import GroupSupportEnv
from rescue_env.envs.vec_env import GroupSupportVecEnv
from rescue_env.comparison import paired_interval
from rescue_env.jsonl import dumps, finite_or_null
from rescue_env.rollout import mean_ci, run_episode

log = logging.getLogger(__name__)
register_configs()

#: SB3's logger keys → the project's namespaced TensorBoard tags.
TAG_PREFIXES = {"train/": "losses/", "rollout/": "charts/", "time/": "charts/", "eval/": "sigma/"}


class NamespacedTensorBoard(KVWriter):
    """TensorBoard output that renames SB3's key prefixes to ``charts/``, ``losses/``…"""

    def __init__(self, folder: str):
        self.inner = TensorBoardOutputFormat(folder)

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        def rename(k: str) -> str:
            for old, new in TAG_PREFIXES.items():
                if k.startswith(old):
                    return new + k[len(old):]
            return k

        self.inner.write({rename(k): v for k, v in key_values.items()}, {rename(k): v for k, v in key_excluded.items()}, step)

    def close(self) -> None:
        self.inner.close()


def split_dialogues(dialogues: list, holdout: float, fold: int | None = None, folds: int = 4) -> tuple[list, list]:
    """(train, held-out) split of one scenario's dialogues, fixed across training seeds.

    Whole couples or families are held out (:func:`rescue_env.data.groups.session_groups`: a group's
    sessions leave together). With ``fold`` (group k-fold), the held-out dialogues are fold
    ``fold`` of ``folds`` (scikit-learn's ``GroupKFold``: each group in one fold, the folds
    about equal in dialogues), so the folds' held-out sets cover every dialogue once; raises
    :class:`~rescue_env.experiments.errors.ConfigError` when there are fewer groups than
    folds. Otherwise groups are held out in a fixed random order until ``holdout`` of the
    dialogues are; with a single group, single dialogues are."""
    from rescue_env.data.groups import session_groups

    by_id = session_groups(dialogues)
    groups = [by_id[d.sample_id] for d in dialogues]
    if fold is not None:
        from sklearn.model_selection import GroupKFold

        n_groups = len(set(groups))
        if n_groups < 2:
            raise ConfigError(f"holdout_fold: a group k-fold needs at least 2 couples or families, and the {dialogues[0].scenario} dialogues "
                             "hold one (its sessions stay together); leave holdout_fold unset to hold out single sessions (holdout=share), or give more data")
        if n_groups < folds:
            raise ConfigError(f"holdout_folds={folds}: the {dialogues[0].scenario} dialogues hold {n_groups} couples or families, "
                             f"fewer than the folds (a group's sessions stay together); set holdout_folds <= {n_groups} or give more data")
        if not 0 <= fold < folds:
            raise ConfigError(f"holdout_fold={fold} is out of range: expected 0 <= holdout_fold < holdout_folds={folds}")
        train_idx, held_idx = list(GroupKFold(n_splits=folds).split(np.zeros(len(dialogues)), groups=groups))[fold]
        return [dialogues[i] for i in sorted(train_idx)], [dialogues[i] for i in sorted(held_idx)]
    names = list(dict.fromkeys(groups)) if len(set(groups)) > 1 else [str(i) for i in range(len(dialogues))]
    if len(set(groups)) <= 1:
        groups = names
    order = np.random.default_rng(12345).permutation(len(names))
    n_eval = max(1, int(round(holdout * len(dialogues)))) if len(dialogues) > 1 else 0
    held: set[str] = set()
    for i in order:
        if sum(g in held for g in groups) >= n_eval:
            break
        held.add(names[int(i)])
    train = [d for d, g in zip(dialogues, groups) if g not in held]
    evaluation = [d for d, g in zip(dialogues, groups) if g in held] or train
    return (train or evaluation), evaluation


def env_kwargs(cfg: DictConfig) -> dict[str, Any]:
    """The env arguments of a training config (the ``env``, ``dynamics`` and ``reward`` groups)."""
    return dict(config=env_config(cfg), dynamics=cfg.dynamics.name, params=cfg.dynamics.params, heterogeneity=cfg.dynamics.heterogeneity, reward=reward_config(cfg))


def evaluate(env: GroupSupportEnv, agent, episodes: int, seed: int) -> dict[str, Any]:
    """σ* figures of ``agent`` over ``episodes`` held-out episodes (common seeds)."""
    records = []
    for k in range(episodes):
        d = env.dialogues[k % len(env.dialogues)]
        records.append(run_episode(env, agent, d.sample_id, k // len(env.dialogues), seed))
    returns = [r.sigma_return for r in records]
    mean, half = mean_ci(returns)
    out = {"sigma_return_mean": mean, "sigma_return_ci95": half, "episodes": episodes}
    for comp in records[0].stats["sigma"]:
        out[f"sigma_{comp}"] = float(np.mean([r.stats["sigma"][comp] for r in records]))
    out["final_max_distress"] = float(np.mean([r.stats["final_max_distress"] for r in records]))
    out["returns"] = returns
    return out


class SigmaEvalCallback(BaseCallback):
    """Every ``eval_freq`` env steps: the policy's held-out σ* return, components and the
    worst-off member's final distress, logged under ``sigma/``."""

    def __init__(self, eval_env: GroupSupportEnv, scenario: str, eval_freq: int, episodes: int, seed: int, horizon: int):
        super().__init__()
        self.eval_env = eval_env
        self.scenario = scenario
        self.eval_freq = eval_freq
        self.episodes = episodes
        self.seed = seed
        self.horizon = horizon
        self.history: list[dict[str, Any]] = []
        self._next = eval_freq

    def _on_training_start(self) -> None:
        # a resumed run keeps its schedule: the next evaluation is the next multiple of eval_freq
        if self.eval_freq:
            self._next = (self.num_timesteps // self.eval_freq + 1) * self.eval_freq

    def _on_step(self) -> bool:
        if self.eval_freq and self.num_timesteps >= self._next:
            self._next += self.eval_freq
            agent = SB3Agent(self.model, self.scenario, self.eval_env.encoding, name="policy", horizon=self.horizon)
            result = evaluate(self.eval_env, agent, self.episodes, self.seed)
            for k, v in result.items():
                if k not in ("returns", "episodes"):
                    self.logger.record(f"sigma/{k}", v)
            self.logger.dump(self.num_timesteps)
            self.history.append({"timesteps": self.num_timesteps, **{k: v for k, v in result.items() if k != "returns"}})
            log.info(
                "%d steps: held-out σ* return %.2f ± %.2f, worst-off final distress %.2f (%d episodes)",
                self.num_timesteps, result["sigma_return_mean"], result["sigma_return_ci95"], result["final_max_distress"], self.episodes,
            )
        return True


def hparams(cfg: DictConfig) -> dict[str, Any]:
    """The run's hyper-parameters as TensorBoard's HParams take them (scalars and strings)."""
    flat = {
        "algo": cfg.algo, "env": cfg.env.scenario, "seed": cfg.seed, "total_timesteps": cfg.total_timesteps,
        "n_envs": cfg.n_envs, "n_steps": cfg.n_steps, "batch_size": cfg.batch_size, "learning_rate": cfg.learning_rate,
        "ent_coef": cfg.ent_coef, "gamma": cfg.gamma, "net_arch": str(list(cfg.net_arch)), "horizon": cfg.env.horizon,
        "dynamics": cfg.dynamics.name,
        # the held-out dialogues: a share, or one fold of a group k-fold
        "holdout": cfg.holdout if cfg.holdout_fold is None else f"fold {cfg.holdout_fold} of {cfg.holdout_folds}",
    }
    flat.update({f"reward.{k}": v for k, v in OmegaConf.to_container(cfg.reward).items() if isinstance(v, (int, float, str, bool))})  # type: ignore[union-attr]
    return flat


#: Metric tags of TensorBoard's HParams view (logged as scalars during and after training).
HPARAM_METRICS = ("sigma/sigma_return_mean", "final/sigma_return_mean", "final/paired_vs_heuristic", "final/final_max_distress")


class HParamsCallback(BaseCallback):
    """Writes the hyper-parameters to TensorBoard's HParams view when training starts."""

    def __init__(self, values: dict[str, Any]):
        super().__init__()
        self.values = values

    def _on_training_start(self) -> None:
        from stable_baselines3.common.logger import HParam

        self.logger.record("hparams", HParam(self.values, {tag: 0.0 for tag in HPARAM_METRICS}), exclude=("stdout", "log", "json", "csv"))

    def _on_step(self) -> bool:
        return True


def in_sweep() -> bool:
    """Whether this job is one of a Hydra multirun (parallel jobs: no progress bars)."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def show_progress(cfg: DictConfig) -> bool:
    """SB3's progress bar: when asked for, on a terminal (not in a log file or a cluster
    job's output), outside sweeps."""
    return bool(cfg.progress) and not in_sweep() and sys.stdout.isatty()


def build_model(cfg: DictConfig, vec_env, tb_dir: Path):
    cls = algo_class(cfg.algo)
    if cfg.resume:
        path = Path(cfg.resume)
        if not path.exists():
            raise FileNotFoundError(f"resume checkpoint {path} does not exist")
        try:
            model = cls.load(path, env=vec_env, device="cpu")
        except ValueError as exc:
            if "spaces do not match" not in str(exc).lower():
                raise
            raise ValueError(
                f"checkpoint {path} does not fit this env ({exc}): it was trained on another scenario or group "
                "cap, or on Dict observations (checkpoints from before the flat training VecEnv); retrain, or "
                "evaluate it with `rescue rollout policy=...`"
            ) from exc
        log.info("resumed from %s at %d steps", path, model.num_timesteps)
        return model
    common = dict(learning_rate=cfg.learning_rate, gamma=cfg.gamma, policy_kwargs={"net_arch": list(cfg.net_arch)}, seed=cfg.seed, device="cpu", verbose=0)
    if cfg.algo in ("maskable_ppo", "ppo"):
        policy = "MlpPolicy"
        if grounded(cfg):
            from rescue_env.agents.grounded import PriorRegularisedPolicy

            policy = PriorRegularisedPolicy
        return cls(policy, vec_env, n_steps=cfg.n_steps, batch_size=cfg.batch_size, ent_coef=cfg.ent_coef, **common)
    if cfg.algo == "a2c":
        return cls("MlpPolicy", vec_env, n_steps=cfg.n_steps, ent_coef=cfg.ent_coef, **common)
    # value-based (dqn, qrdqn): replay from the first batch on, one gradient step per env step
    return cls("MlpPolicy", vec_env, batch_size=cfg.batch_size, learning_starts=cfg.batch_size, **common)


def grounded(cfg: DictConfig) -> bool:
    """Whether the run uses the behaviour prior (``prior.coef``, ``prior.speak_coef``, ``prior.real_coef``,
    ``prior.demo_coef``, ``prior.bc_epochs`` or ``prior.agreement``; ``experiment=grounded`` sets them);
    MaskablePPO only."""
    p = cfg.prior
    set_ = [f"prior.{k}={p[k]}" for k in ("coef", "speak_coef", "real_coef", "demo_coef", "bc_epochs", "agreement") if p[k]]
    if set_ and cfg.algo != "maskable_ppo":
        raise ConfigError(f"grounded training ({', '.join(set_)}; experiment=grounded sets them) needs algo=maskable_ppo "
                          f"(got algo={cfg.algo}): the KL to the behaviour prior is taken on MaskablePPO's masked distribution")
    return bool(set_)


def ground(cfg: DictConfig, model: Any, train_dialogues: list, vec_env: Any, out: Path, held: Sequence[Any] = ()) -> tuple[Any, dict[str, Any]]:
    """The behaviour prior of a grounded run (read from ``prior.path`` or fitted on the training
    dialogues and saved as ``prior.json``), behaviour cloning of a new model on the real moves,
    and the KL penalty (:mod:`rescue_env.agents.grounded`). ``(None, {})`` for other runs.
    A saved prior fitted on any of the ``held`` dialogues is refused while ``prior.agreement``
    scores them (its answers there would be on its own training data)."""
    if not grounded(cfg):
        return None, {}
    from rescue_env.agents.grounded import behaviour_clone, prior_on_obs, real_moves, regularise
    from rescue_env.agents.prior import BehaviourPrior

    scenario = cfg.env.scenario
    t0 = time.perf_counter()
    prior = BehaviourPrior.load(cfg.prior.path) if cfg.prior.path else BehaviourPrior.fit(train_dialogues, [scenario])
    # a prior fitted here saw only the training dialogues (or, with one group, the held-out
    # ones are the training ones and every predictor sees them alike)
    if cfg.prior.path and (seen := sorted(set(prior.fitted_on) & {d.sample_id for d in held})):
        message = (f"prior.path={cfg.prior.path} was fitted on {len(seen)} of this run's {len(held)} held-out dialogues "
                   f"({', '.join(seen[:3])}{', ...' if len(seen) > 3 else ''})")
        if cfg.prior.agreement:
            raise ConfigError(f"{message}: its agreement with real therapists would be scored on its own training data; "
                              "leave prior.path unset (the prior is then fitted on this run's training dialogues), or prior.agreement=false")
        log.warning("%s; the held-out σ* evaluation starts from dialogues the prior has seen", message)
    info: dict[str, Any] = {"coef": cfg.prior.coef, "path": str(cfg.prior.path or prior.save(out / "prior.json"))}
    observer, encoding = vec_env.get_attr("observer")[0], vec_env.get_attr("encoding")[0]
    clone = bool(cfg.prior.bc_epochs) and not cfg.resume
    kl = cfg.prior.coef > 0 or cfg.prior.speak_coef > 0 or cfg.prior.real_coef > 0
    moves = real_moves(train_dialogues, observer, encoding) if clone or cfg.prior.demo_coef > 0 or cfg.prior.real_coef > 0 else None
    if clone:
        obs, actions, masks = moves
        nll = behaviour_clone(model, obs, actions, masks, epochs=cfg.prior.bc_epochs, seed=cfg.seed, observer=observer)
        info["bc"] = {"moves": len(actions), "nll_first_epoch": nll[0], "nll_last_epoch": nll[-1]}
        log.info("behaviour cloning: %d %s decisions, NLL %.3f -> %.3f over %d epochs", len(actions), "real" if cfg.data.path else "bundled seeds'",
                 nll[0], nll[-1], len(nll))
    info["speak_coef"], info["strategy_coef"], info["demo_coef"] = cfg.prior.speak_coef, cfg.prior.strategy_coef, cfg.prior.demo_coef
    info["real_coef"] = cfg.prior.real_coef
    if kl or cfg.prior.demo_coef > 0:
        regularise(model, prior_on_obs(prior, observer, encoding) if kl else None, cfg.prior.coef,
                   n_strategies=encoding.n_strategies, speak_coef=cfg.prior.speak_coef, strategy_coef=cfg.prior.strategy_coef,
                   demos=moves, demo_coef=cfg.prior.demo_coef, seed=cfg.seed, observer=observer, real_coef=cfg.prior.real_coef)
    info["setup_seconds"] = time.perf_counter() - t0
    return prior, info


def real_agreement(model: Any, prior: Any, train: list, held: list, scenario: str) -> dict[str, Any]:
    """ITP F1, STP R@1 and SSP R@1 (%) on the held-out real dialogues of the policy, the
    behaviour prior and the majority baseline (both fitted on ``train``)."""
    from rescue_env.agents.prior import PriorAgent
    from rescue_env.tasks import AgentPredictor, make_baseline
    from rescue_env.tasks.runner import evaluate as evaluate_tasks

    predictors = {
        "policy": AgentPredictor(SB3Agent(model, scenario, deterministic=True, name="policy"), name="policy", fit_dialogues=train),
        "prior": AgentPredictor(lambda s: PriorAgent(prior, s), name="imitation", fit_dialogues=train),
        "majority": make_baseline("majority", fit_dialogues=train),
    }
    out: dict[str, Any] = {"dialogues": [d.sample_id for d in held]}
    for name, predictor in predictors.items():
        r = evaluate_tasks(held, ["itp", "stp", "ssp"], predictor)
        out[name] = {"itp_f1": 100 * r["itp"].get("f1", 0.0), "stp_r1": 100 * r["stp"].get("recall_at_1", 0.0), "ssp_r1": 100 * r["ssp"].get("recall_at_1", 0.0),
                     "n": {t: r[t]["n"] for t in ("itp", "stp", "ssp")}}  # fmt: skip
    return out


def simulated_agreement(cfg: DictConfig, model: Any, prior: Any, held: list, steps: int | None = None) -> dict[str, Any]:
    """How the policy moves in the simulator on the held-out dialogues (8 sessions, ``steps``
    steps each; default 4 · ``cfg.env.horizon``): its target roles and strategies, and how
    often its move is the behaviour prior's most probable one there
    (:func:`~rescue_env.agents.grounded.simulated_moves`); beside ``real_agreement``, it shows
    whether the policy acts on simulated states as it answers real ones."""
    from rescue_env.agents.grounded import prior_on_obs, simulated_moves

    venv = GroupSupportVecEnv(num_envs=8, seed=int(cfg.seed) + 30_000, data_path=held, **env_kwargs(cfg))
    try:
        return simulated_moves(model, venv, steps or 4 * cfg.env.horizon, prior_on_obs(prior, venv.observer, venv.encoding))
    finally:
        venv.close()


def final_comparison(cfg: DictConfig, model: Any, eval_env: GroupSupportEnv, train_dialogues: list, prior_path: str | None) -> dict[str, Any]:
    """σ* of the policy and the non-learned agents on the same held-out episodes, with the
    paired difference of each to the heuristic."""
    scenario = cfg.env.scenario
    final: dict[str, Any] = {}
    final["policy"] = evaluate(eval_env, SB3Agent(model, scenario, eval_env.encoding, name="policy", horizon=cfg.env.horizon), cfg.eval_episodes, cfg.seed + 20_000)
    for name in ("never", "random", "heuristic", "imitation"):
        agent = make_agent(name, scenario, encoding=eval_env.encoding, seed=cfg.seed, imitation_data=train_dialogues, prior=prior_path)
        final[name] = evaluate(eval_env, agent, cfg.eval_episodes, cfg.seed + 20_000)
    for name, result in final.items():
        if name != "heuristic":
            result["paired_vs_heuristic"] = paired_interval(result["returns"], final["heuristic"]["returns"])
    for tag, value in (
        ("final/sigma_return_mean", final["policy"]["sigma_return_mean"]),
        ("final/paired_vs_heuristic", final["policy"]["paired_vs_heuristic"]["mean"]),
        ("final/final_max_distress", final["policy"]["final_max_distress"]),
    ):
        model.logger.record(tag, value)
    model.logger.dump(model.num_timesteps)
    return final


def log_comparison(cfg: DictConfig, final: dict[str, Any], agreement: dict[str, Any] | None) -> None:
    rows = []
    for k, v in final.items():
        p = v.get("paired_vs_heuristic")
        delta = "reference" if p is None else f"{p['mean']:+.2f} [{p['ci_low']:+.2f}, {p['ci_high']:+.2f}]"
        rows.append([k, f"{v['sigma_return_mean']:.2f} ± {v['sigma_return_ci95']:.2f}", delta, f"{v['final_max_distress']:.2f}"])
    table = tabulate(rows, headers=["agent", "σ* return ± 95 %", "Δ vs heuristic [95 % CI]", "final worst d"], disable_numparse=True)
    log.info("held-out comparison (%d episodes, the same for every agent):\n%s", cfg.eval_episodes, table)
    if agreement:
        rows = [[k, f"{v['itp_f1']:.1f}", f"{v['stp_r1']:.1f}", f"{v['ssp_r1']:.1f}"] for k, v in agreement.items() if k != "dialogues"]
        # the bundled seeds were written for this project: their "therapists" are not real ones
        whose = "real therapists" if cfg.data.path else "the bundled seeds' therapist (sessions written for this project; data.path=[...] for real ones)"
        log.info("agreement with %s on %d held-out dialogues (%%):\n%s", whose, len(agreement["dialogues"]), tabulate(rows, headers=["predictor", "ITP F1", "STP R@1", "SSP R@1"], disable_numparse=True))


def run(cfg: DictConfig, out: Path) -> dict[str, Any]:
    """The training job (callable without Hydra's CLI for tests)."""
    t0 = time.perf_counter()
    torch.set_num_threads(cfg.torch_threads)
    set_random_seed(cfg.seed)
    scenario = cfg.env.scenario
    if scenario not in ("couple", "family"):
        raise ValueError(f"training runs one scenario: env=couple or env=family (got env.scenario={scenario!r})")
    env_id = f"rescue_env/{scenario.capitalize()}-v0"
    fold = "" if cfg.holdout_fold is None else f"fold{cfg.holdout_fold}__"  # a k-fold's jobs apart in TensorBoard
    run_name = f"{env_id.replace('/', '_')}__{cfg.algo}__{cfg.seed}__{fold}{int(time.time())}"

    # every group must fit the env (env.max_members): an error naming the sample, never a cut
    dialogues, source = load_playable(cfg.data.path, cfg.data.strict, cfg.env.max_members, scenario)
    if not dialogues:
        raise ConfigError(f"no {scenario} dialogue in {source}")
    train_dialogues, eval_dialogues = split_dialogues(dialogues, cfg.holdout, cfg.holdout_fold, cfg.holdout_folds)
    kwargs = env_kwargs(cfg)

    # the native VecEnv: flat observations for MlpPolicy, batched calibrated steps, Monitor's
    # episode statistics; the same episodes as DummyVecEnv over GroupSupportEnv, faster
    vec_env = GroupSupportVecEnv(num_envs=cfg.n_envs, seed=cfg.seed, data_path=train_dialogues, **kwargs)
    eval_env = GroupSupportEnv(data_path=eval_dialogues, **kwargs)

    model = build_model(cfg, vec_env, out)
    prior, grounding = ground(cfg, model, train_dialogues, vec_env, out, eval_dialogues)  # experiment=grounded
    tb_dir = out / "tb" / run_name
    model.set_logger(configure(None, []))
    model.logger.output_formats.append(NamespacedTensorBoard(str(tb_dir)))
    tracker = tracking.start(cfg.tracking, out, run_name, hparams(cfg))  # MLflow / W&B, optional
    if tracker is not None:
        model.logger.output_formats.append(tracker)
    sigma_cb = SigmaEvalCallback(eval_env, scenario, cfg.eval_freq, cfg.eval_episodes, cfg.seed + 10_000, cfg.env.horizon)
    callbacks: list[BaseCallback] = [
        HParamsCallback(hparams(cfg)),
        CheckpointCallback(save_freq=max(cfg.checkpoint_freq // cfg.n_envs, 1), save_path=str(out / "checkpoints"), name_prefix="rl_model"),
        sigma_cb,
    ]
    if cfg.task_eval:
        from rescue_env.tasks.callback import TaskEvalCallback  # static-task figures

        callbacks.append(TaskEvalCallback(eval_dialogues, scenario, agent_factory=lambda m, s: SB3Agent(m, s, name="policy"), eval_freq=cfg.eval_freq))
    remaining = max(cfg.total_timesteps - model.num_timesteps, 0)
    t_learn = time.perf_counter()
    log.info("training %s on %s for %d steps (%d envs); TensorBoard: %s", cfg.algo, env_id, remaining, cfg.n_envs, tb_dir)
    model.learn(total_timesteps=remaining, callback=CallbackList(callbacks), reset_num_timesteps=not cfg.resume, tb_log_name=run_name, progress_bar=show_progress(cfg))
    learn_s = time.perf_counter() - t_learn
    model_path = out / "model.zip"
    model.save(model_path)

    final = final_comparison(cfg, model, eval_env, train_dialogues, grounding.get("path"))
    agreement = real_agreement(model, prior, train_dialogues, eval_dialogues, scenario) if cfg.prior.agreement else None
    simulated = simulated_agreement(cfg, model, prior, eval_dialogues) if cfg.prior.agreement else None
    if simulated and not simulated["moves"]:
        log.info("in the simulator (held-out dialogues): the policy never spoke")
    elif simulated:
        log.info("in the simulator (held-out dialogues): the policy spoke %d times; %.0f %% on the prior's most probable target, %.0f %% with its "
                 "strategy; targets %s", simulated["moves"], simulated["prior_target_r1"], simulated["prior_strategy_r1"],
                 ", ".join(f"{k} {v:.0f} %" for k, v in simulated["target_roles"].items()))
    if tracker is not None:
        tracker.close()
    metrics = {
        "run_name": run_name, "env_id": env_id, "algo": cfg.algo, "seed": cfg.seed, "timesteps": int(model.num_timesteps),
        "learn_seconds": learn_s, "steps_per_second": remaining / learn_s if learn_s > 0 else None,
        "train_dialogues": [d.sample_id for d in train_dialogues], "eval_dialogues": [d.sample_id for d in eval_dialogues],
        "eval_history": sigma_cb.history, "final_eval": final,
        # the two axes of a grounded run: σ* margin over the heuristic (simulated, held out)
        # and agreement with real therapists (held-out real dialogues)
        "sigma_margin_vs_heuristic": final["policy"]["paired_vs_heuristic"]["mean"],
        "grounding": grounding or None, "real_agreement": agreement, "sim_agreement": simulated,
        "model": str(model_path), "elapsed_s": time.perf_counter() - t0,
    }  # fmt: skip
    atomic_write_text(out / "metrics.json", dumps(finite_or_null(metrics), indent=1))  # strict JSON: undefined figures null
    log_comparison(cfg, final, agreement)
    log.info("model: %s\nrun folder: %s  (%.0f s)", model_path, out, metrics["elapsed_s"])
    vec_env.close()
    return metrics


@hydra.main(version_base="1.3", config_path="pkg://rescue_env.conf", config_name="train")
@user_errors
def main(cfg: DictConfig) -> None:
    run(cfg, run_dir())


if __name__ == "__main__":
    main()
