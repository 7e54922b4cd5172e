"""Config composition of every command and group option without Hydra's CLI
(``rescue_env.experiments.config.compose``), bad overrides, the launchers, and no key in any config."""

from __future__ import annotations

import re
import sys

import pytest
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rescue_env.experiments.config import CONF_DIR, compose, register_configs

COMPOSE_ERRORS = (HydraException, OmegaConfBaseException)


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def test_every_group_has_its_options():
    assert options("env") == ["all", "couple", "family"]
    assert options("dynamics") == ["calibrated", "llm"]
    assert options("reward") == ["sigma_star"]
    assert options("llm") == ["default", "local", "ollama", "openai", "vllm"]
    assert {"none", "train_small"} <= set(options("experiment"))
    assert options("data") == ["seeds"]
    assert {"never", "random", "heuristic", "imitation", "ppo", "maskable_ppo", "none"} <= set(options("agent"))


def test_defaults():
    r = compose("rollout")
    assert r.episodes == 6 and r.seed == 0 and list(r.agents) == ["never", "random", "heuristic", "imitation"]
    assert r.agent.name is None and r.policy is None and r.data.path is None and r.env.scenario == "all"
    assert r.compare_to == "heuristic"
    assert r.dynamics.name == "calibrated" and r.reward.lam == 1.0 and r.llm.api_key_env == "OPENAI_API_KEY"
    t = compose("train")
    assert t.algo == "maskable_ppo" and t.total_timesteps == 100_000 and t.resume is None and t.reward.gamma == 0.99
    c = compose("calibrate")
    assert c.folds == 5 and c.output == "dynamics_params.json" and c.data.path is None


# --- every option of every group ------------------------------------------------------------


@pytest.mark.parametrize("command", ["rollout", "train"])
@pytest.mark.parametrize("scenario", ["couple", "family"])
def test_env_group(command, scenario):
    cfg = compose(command, [f"env={scenario}"])
    assert cfg.env.scenario == scenario and cfg.env.horizon == 30 and cfg.env.terminate_on_settle is True


@pytest.mark.parametrize("command", ["rollout", "train"])
@pytest.mark.parametrize("dynamics", ["calibrated", "llm"])
def test_dynamics_group(command, dynamics):
    cfg = compose(command, [f"dynamics={dynamics}"])
    assert cfg.dynamics.name == dynamics and cfg.dynamics.params is None


@pytest.mark.parametrize("command", ["rollout", "train"])
def test_reward_group(command):
    cfg = compose(command, ["reward=sigma_star", "reward.lam=0.5", "reward.cost=0.1"])
    assert (cfg.reward.w_mean, cfg.reward.beta, cfg.reward.lam, cfg.reward.cost) == (1.0, 0.5, 0.5, 0.1)


@pytest.mark.parametrize("agent", options("agent"))
def test_agent_group(agent):
    cfg = compose("rollout", [f"agent={agent}"])
    assert cfg.agent.name == (None if agent == "none" else agent)
    assert cfg.agent.policy is None and cfg.agent.deterministic is True
    cfg = compose("rollout", [f"agent={agent}", "agent.policy=/x/model.zip"])
    assert cfg.agent.policy == "/x/model.zip"


@pytest.mark.parametrize(
    "llm,base_url,key_env",
    [
        ("default", "http://127.0.0.1:8000/v1", "OPENAI_API_KEY"),
        ("vllm", "http://127.0.0.1:8000/v1", "VLLM_API_KEY"),
        ("ollama", "http://127.0.0.1:11434/v1", "OLLAMA_API_KEY"),
        ("openai", "https://api.openai.com/v1", "OPENAI_API_KEY"),
        ("local", None, "LOCAL_LLM_API_KEY"),
    ],
)
def test_llm_group(llm, base_url, key_env):
    cfg = compose("rollout", [f"llm={llm}"])
    assert cfg.llm.base_url == base_url and cfg.llm.api_key_env == key_env
    assert cfg.llm.model and cfg.llm.max_retries == 5 and cfg.llm.temperature == 0.0
    assert (cfg.llm.local is not None) == (llm == "local")  # the embedded server: only llm=local


@pytest.mark.parametrize("command", ["rollout", "train", "calibrate"])
def test_data_group(command, tmp_path):
    assert compose(command, ["data=seeds"]).data.path is None
    cfg = compose(command, [f"data.path={tmp_path}/b.jsonl", "data.strict=true"])
    assert cfg.data.path == f"{tmp_path}/b.jsonl" and cfg.data.strict is True


@pytest.mark.parametrize("command", ["rollout", "train", "calibrate"])
def test_experiment_none(command):
    assert compose(command, ["experiment=none"]).experiment.name == "default"


#: which command each preset is for (a preset sets that command's budget keys)
PRESET_COMMAND = {"rollout_smoke": "rollout", "train_small": "train", "grounded": "train"}


def test_every_preset_is_known():
    assert set(options("experiment")) == {"none", *PRESET_COMMAND}


def test_experiment_train_small_sets_the_training_budget():
    cfg = compose("train", ["experiment=train_small"])
    assert cfg.experiment.name == "train_small"
    assert (cfg.total_timesteps, cfg.n_envs, cfg.n_steps, cfg.eval_freq, cfg.eval_episodes) == (300_000, 8, 256, 50_000, 60)
    # a later override still wins
    assert compose("train", ["experiment=train_small", "total_timesteps=1000"]).total_timesteps == 1000


@pytest.mark.parametrize("coef,strategy,real", [(None, 0.03, 0.3), ("0", 0.0, 0.0), ("0.03", 0.003, 0.03), ("1", 0.1, 1.0)])
def test_experiment_grounded_weights_follow_prior_coef(coef, strategy, real):
    """One knob: a sweep over prior.coef moves the strategy term (a tenth of it) and the
    real-state term (equal) with it, so prior.coef=0 is σ* alone."""
    cfg = compose("train", ["experiment=grounded", *([f"prior.coef={coef}"] if coef else [])])
    assert (cfg.prior.strategy_coef, cfg.prior.real_coef) == (strategy, real)
    settings = OmegaConf.to_object(cfg).prior  # the schema's checks see the resolved numbers
    assert (settings.strategy_coef, settings.real_coef) == (strategy, real)
    # a number given for either sets it apart from prior.coef
    cfg = compose("train", ["experiment=grounded", "prior.coef=0.3", "prior.strategy_coef=0.05", "prior.real_coef=0"])
    assert (cfg.prior.strategy_coef, cfg.prior.real_coef) == (0.05, 0.0)


def test_experiment_rollout_smoke_shrinks_the_rollout():
    # the preset applies after the schema's `episodes = 6`
    cfg = compose("rollout", ["experiment=rollout_smoke"])
    assert cfg.experiment.name == "rollout_smoke" and cfg.episodes == 1
    assert compose("rollout", ["experiment=rollout_smoke", "episodes=3"]).episodes == 3


@pytest.mark.parametrize(
    "command,preset",
    [(c, p) for p, own in PRESET_COMMAND.items() for c in ("rollout", "train", "calibrate") if c != own],
)
def test_a_preset_of_another_command_is_refused_naming_the_key(command, preset):
    key = {"rollout_smoke": "episodes", "train_small": "total_timesteps", "grounded": "total_timesteps"}[preset]
    with pytest.raises(COMPOSE_ERRORS, match=key):
        compose(command, [f"experiment={preset}"])


def test_all_groups_at_once():
    cfg = compose(
        "rollout",
        ["env=family", "dynamics=llm", "reward=sigma_star", "agent=heuristic", "llm=vllm", "data=seeds", "episodes=2", "seed=3"],
    )
    assert (cfg.env.scenario, cfg.dynamics.name, cfg.agent.name, cfg.llm.api_key_env, cfg.episodes, cfg.seed) == (
        "family", "llm", "heuristic", "VLLM_API_KEY", 2, 3,
    )
    t = compose("train", ["env=family", "dynamics=calibrated", "algo=ppo", "seed=2", "net_arch=[16,16]", "resume=/r.zip"])
    assert (t.env.scenario, t.algo, t.seed, list(t.net_arch), t.resume) == ("family", "ppo", 2, [16, 16], "/r.zip")


# --- one settings source ------------------------------------------------------------------

#: the schema every group's options merge into
GROUP_SCHEMAS = {
    "data": "DataConfig", "env": "RolloutEnvConfig", "dynamics": "DynamicsConfig", "reward": "RewardSchema",
    "agent": "AgentConfig", "experiment": "ExperimentConfig", "tracking": "TrackingConfig",
}
COMMANDS = ["rollout", "train", "calibrate", "eval_tasks", "judge"]


def _defaults_of(schema) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(schema))


def _restated(values: dict, defaults: dict, prefix: str = "") -> list[str]:
    out = []
    for key, value in values.items():
        if key in ("defaults", "hydra") or key not in defaults:
            continue
        if isinstance(value, dict) and isinstance(defaults[key], dict) and value:
            out += _restated(value, defaults[key], f"{prefix}{key}.")
        elif value == defaults[key]:
            out.append(f"{prefix}{key}")
    return out


def _yaml(path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


@pytest.mark.parametrize("group", [*GROUP_SCHEMAS, "llm"])
def test_group_options_hold_only_what_differs_from_the_schema(group):
    import rescue_env.experiments.config as schemas
    from rescue_env.llm.config import LLMConfig

    defaults = _defaults_of(LLMConfig if group == "llm" else getattr(schemas, GROUP_SCHEMAS[group]))
    restated = {p.name: _restated(_yaml(p), defaults) for p in (CONF_DIR / group).glob("*.yaml")}
    assert {name: keys for name, keys in restated.items() if keys} == {}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_composes_from_its_registered_schema_and_restates_none_of_it(command):
    from hydra.core.config_store import ConfigStore

    register_configs()
    primary = _yaml(CONF_DIR / f"{command}.yaml")
    assert primary["defaults"][0] == f"{command}_schema"
    schema = ConfigStore.instance().load(f"{command}_schema.yaml").node
    assert OmegaConf.get_type(compose(command)) is OmegaConf.get_type(schema)
    assert _restated(primary, OmegaConf.to_container(schema)) == []


def test_judge_settings_are_typed_and_checked_at_composition():
    from rescue_env.experiments.judge import judge_config

    cfg = compose("judge", ["scorer=llm", "twins.items_per_agent=2", "llm.model=m"])
    settings = judge_config(cfg)
    assert (settings.scorer, settings.twins.items_per_agent, settings.model) == ("llm", 2, "m")
    with pytest.raises(COMPOSE_ERRORS, match="item_per_agent"):  # a typo is refused, not ignored
        compose("judge", ["twins.item_per_agent=2"])
    with pytest.raises(COMPOSE_ERRORS, match="batch_size"):
        compose("judge", ["batch_size=many"])


#: every setting that names data, by command
PATH_SETTINGS = {
    "rollout": ["data.path", "imitation_data"],
    "train": ["data.path"],
    "calibrate": ["data.path", "holdout.path"],
    "eval_tasks": ["data.path", "fit_data"],
    "judge": ["data.path"],
}


@pytest.mark.parametrize("command,setting", [(c, s) for c, settings in PATH_SETTINGS.items() for s in settings])
def test_every_data_path_setting_takes_a_list(command, setting, tmp_path):
    a, b = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    cfg = compose(command, [f"{setting}=[{a},{b}]"])
    assert list(OmegaConf.select(cfg, setting)) == [a, b]
    assert OmegaConf.select(compose(command, [f"{setting}={a}"]), setting) == a


@pytest.fixture(scope="module")
def two_files(tmp_path_factory):
    from rescue_env.data import load_dialogues, write_jsonl

    from dataclasses import replace

    d = tmp_path_factory.mktemp("two")
    # copies under their own sample ids: calibrate refuses a hold-out that shares ids with the fit
    seeds = [replace(s, sample_id=f"copy/{s.sample_id}") for s in load_dialogues()]
    couples = write_jsonl([s for s in seeds if s.scenario == "couple"][:3], d / "couples.jsonl")
    families = write_jsonl([s for s in seeds if s.scenario == "family"][:2], d / "families.jsonl")
    return couples, families


def test_calibrate_scores_a_holdout_of_several_files(two_files, rescue, tmp_path):
    couples, families = two_files
    run = rescue(["calibrate", f"hydra.run.dir={tmp_path / 'cal'}", f"holdout.path=[{couples},{families}]", "sim_draws=2"])
    assert run.rc == 0, run.err[-2000:]
    import json

    fidelity = json.loads((tmp_path / "cal" / "fidelity.json").read_text())
    assert {s: f["dialogues"] for s, f in fidelity["holdout"].items()} == {"couple": 3, "family": 2}
    assert fidelity["holdout_source"] == f"{couples}, {families}"


def test_eval_tasks_fits_its_baselines_on_several_files(two_files, rescue, tmp_path):
    import json

    couples, families = two_files
    run = rescue(["eval-tasks", f"hydra.run.dir={tmp_path / 'ev'}", f"fit_data=[{couples},{families}]", f"data.path={couples}",
                  "tasks=[itp]", "progress=false"])
    assert run.rc == 0, run.err[-2000:]
    assert json.loads((tmp_path / "ev" / "run.json").read_text())["config"]["fit_data"] == [str(couples), str(families)]


# --- bad overrides --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command,override,match",
    [
        ("rollout", "episodes=abc", "episodes"),
        ("rollout", "nokey=1", "nokey"),
        ("rollout", "env.horizon=soon", "horizon"),
        ("rollout", "env=moon", "moon"),
        ("rollout", "agent=oracle", "oracle"),
        ("rollout", "llm.temperature=hot", "temperature"),
        ("rollout", "reward.lam=heavy", "lam"),
        ("train", "total_timesteps=abc", "total_timesteps"),
        ("train", "n_envs=two", "n_envs"),
        ("train", "typo_key=3", "typo_key"),
        ("train", "agent=heuristic", "agent"),  # not a train group
        ("calibrate", "folds=many", "folds"),
        ("calibrate", "episodes=1", "episodes"),
    ],
)
def test_bad_override_raises(command, override, match):
    with pytest.raises(COMPOSE_ERRORS, match=match):
        compose(command, [override])


def test_bad_override_through_the_cli_exits_nonzero(run_cli, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the CLI rewrites it for Hydra
    run = run_cli("rollout", f"hydra.run.dir={tmp_path / 'r'}", "episodes=abc")
    assert run.rc != 0 and "episodes" in run.err
    assert not any((tmp_path / "r").glob("episodes.jsonl*"))


# --- launchers ------------------------------------------------------------------------------


def _compose_with_hydra(config_name: str, overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_configs()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return hydra_compose(config_name=config_name, overrides=overrides, return_hydra_config=True)


def test_train_default_launcher_is_joblib_with_two_jobs():
    cfg = _compose_with_hydra("train", [])
    assert "joblib" in cfg.hydra.launcher._target_.lower() and cfg.hydra.launcher.n_jobs == 2
    assert cfg.hydra.job.chdir is False


@pytest.mark.parametrize("launcher,target", [("slurm", "submitit"), ("basic", "basic"), ("joblib", "joblib"), ("local", "joblib")])
def test_train_composes_with_launcher(launcher, target):
    cfg = _compose_with_hydra("train", [f"hydra/launcher={launcher}"])
    assert target in cfg.hydra.launcher._target_.lower()
    if launcher == "slurm":
        assert "slurm" in cfg.hydra.launcher._target_.lower()
        assert cfg.hydra.launcher.cpus_per_task == 8 and cfg.hydra.launcher.timeout_min == 120


@pytest.mark.parametrize("command", ["train", "rollout"])
def test_slurm_preset_takes_cluster_overrides(command):
    # the README's form: rescue train -m hydra/launcher=slurm hydra.launcher.partition=cpu ...
    cfg = _compose_with_hydra(command, ["hydra/launcher=slurm", "hydra.launcher.partition=cpu"])
    launcher = cfg.hydra.launcher
    assert "submitit" in launcher._target_.lower() and "slurm" in launcher._target_.lower()
    assert launcher.partition == "cpu" and launcher.cpus_per_task == 8 and launcher.mem_gb == 16


# --- no key in any config -------------------------------------------------------------------

KEY_LINE = re.compile(r"^\s*(api_key|openai_api_key|key|token|secret|password)\s*:", re.I | re.M)


@pytest.mark.parametrize("llm", options("llm"))
def test_configs_name_the_key_variable_never_a_key(llm):
    cfg = compose("rollout", [f"llm={llm}"])
    text = OmegaConf.to_yaml(cfg)
    assert "api_key_env:" in text
    assert not KEY_LINE.search(text), text
    assert set(cfg.llm.keys()) & {"api_key", "key", "token"} == set()
    # and every YAML file under conf/ too
    for f in CONF_DIR.rglob("*.yaml"):
        assert not KEY_LINE.search(f.read_text(encoding="utf-8")), f
