"""The Hydra callback that checks a composed config before anything is written.

Every ``rescue`` Hydra command lists it under ``hydra.callbacks``. At ``on_run_start`` —
after composition, before Hydra creates the run folder and writes ``.hydra/*.yaml`` — it:

1. refuses secrets in the config: an ``api_key`` setting anywhere (``+llm.api_key=…`` is
   accepted by Hydra's parser, ignored by the client, and would be saved), any value shaped
   like a key, a URL with a user name or password in it (``llm.base_url=http://user:pass@host/v1``),
   and an ``llm.api_key_env`` that is not a variable name;
2. checks every typed section (the dataclass schemas of :mod:`rescue_env.experiments.config` and
   their ranges) by building it;
3. compares the run folder's record of the config that defines its results (see
   :mod:`rescue_env.experiments.run_record`) with this one, refusing a mismatch unless ``overwrite=true``.

A refusal is one line on stderr and exit code 2 (:mod:`rescue_env.experiments.errors`). In a sweep
(``-m``) the same checks run per job at ``on_job_start``; a refused job is recorded as failed
and the others go on, and at the end of the sweep the guard names the failed jobs and sets
the exit code (:mod:`rescue_env.experiments.sweep`).
"""

from __future__ import annotations

import copy
import re
import sys
import traceback
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write

from rescue_env.experiments import sweep
from rescue_env.experiments.errors import EXIT_BUG, EXIT_USER_ERROR, USER_ERRORS, ConfigError, UserError, fail, mark_composed, record_outcome
from rescue_env.rollout import EPISODES_FILES, episodes_file
from rescue_env.secrets import has_url_credentials, looks_like_key

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEY_SETTING_RE = re.compile(r"(^|[._])api_?key$", re.IGNORECASE)


def key_setting_message(path: str, env_name: str = "OPENAI_API_KEY") -> str:
    """The refusal of a key given as a setting (it names the variable to set instead)."""
    return (
        f"{path} is not a setting: an API key never goes into a config (it would be saved in the run folder). "
        f"Set the environment variable named by llm.api_key_env instead, e.g. `export {env_name}=<key>`"
    )


def url_credentials_message(path: str, env_name: str = "OPENAI_API_KEY") -> str:
    """The refusal of a URL that carries a user name or password (it would be saved)."""
    return (
        f"{path} holds a user name or password (the USER:PASSWORD@ before the host), which would be saved in the run folder: "
        f"give the URL without them (http://HOST:PORT/v1) and put the key in the environment variable named by "
        f"llm.api_key_env, e.g. `export {env_name}=<key>`"
    )


def check_secrets(cfg: DictConfig) -> None:
    """Refuse an ``api_key`` setting, a key-shaped value and a malformed ``llm.api_key_env``."""
    env_name = str(OmegaConf.select(cfg, "llm.api_key_env", default="OPENAI_API_KEY") or "OPENAI_API_KEY")
    for path, value in _leaves(cfg):
        if _KEY_SETTING_RE.search(path.rsplit(".", 1)[-1]):
            raise ConfigError(key_setting_message(path, env_name if _ENV_NAME_RE.match(env_name) else "OPENAI_API_KEY"))
        if isinstance(value, str) and has_url_credentials(value):
            raise ConfigError(url_credentials_message(path, env_name if _ENV_NAME_RE.match(env_name) else "OPENAI_API_KEY"))
        if isinstance(value, str) and looks_like_key(value):
            if path.endswith("api_key_env"):
                raise ConfigError(
                    f"{path} holds what looks like an API key; it takes the *name* of the environment variable "
                    "that holds the key (e.g. llm.api_key_env=OPENAI_API_KEY): set that variable to the key instead"
                )
            raise ConfigError(f"{path} holds what looks like an API key; keys go in the environment variable named by llm.api_key_env")
    if OmegaConf.select(cfg, "llm") is not None:
        name = OmegaConf.select(cfg, "llm.api_key_env")
        if not isinstance(name, str) or not _ENV_NAME_RE.match(name):
            raise ConfigError(
                f"llm.api_key_env={name!s:.12} is not an environment variable name (letters, digits, '_'): "
                "it names the variable that holds the key, e.g. llm.api_key_env=OPENAI_API_KEY"
            )


def _leaves(node: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, value) of every leaf, interpolations resolved where they can be."""
    out: list[tuple[str, Any]] = []
    if isinstance(node, DictConfig):
        for key in node.keys():
            path = f"{prefix}.{key}" if prefix else str(key)
            try:
                value = node[key]
            except Exception:  # an interpolation that cannot resolve here (hydra runtime keys)
                value = OmegaConf.to_container(node, resolve=False).get(key)  # type: ignore[union-attr]
            out.extend(_leaves(value, path) if isinstance(value, (DictConfig, ListConfig)) else [(path, value)])
            if isinstance(value, (DictConfig, ListConfig)) and _KEY_SETTING_RE.search(str(key)):
                out.append((path, None))
    elif isinstance(node, ListConfig):
        for i, value in enumerate(node):
            out.extend(_leaves(value, f"{prefix}[{i}]") if isinstance(value, (DictConfig, ListConfig)) else [(f"{prefix}[{i}]", value)])
    return out


def check_schema(cfg: DictConfig) -> None:
    """Build every typed section of ``cfg`` (its dataclass runs its range checks); a bad
    value is reported with its dotted path."""
    for key in cfg.keys():
        node = cfg.get(key)
        if isinstance(node, DictConfig) and OmegaConf.get_type(node) not in (dict, None):
            try:
                OmegaConf.to_object(node)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{key}.{exc}" if _starts_with_field(exc) else f"{key}: {exc}") from exc
    if OmegaConf.get_type(cfg) not in (dict, None):
        try:
            OmegaConf.to_object(cfg)
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc)) from exc


def _starts_with_field(exc: BaseException) -> bool:
    """The message starts with ``field=value`` (the range checks' form)."""
    return bool(re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", str(exc)))


def _check_judge(cfg: DictConfig) -> None:
    """``rescue judge``'s ``run_dir`` must be a rollout folder (its settings are checked by
    their schema, like every command's)."""
    run_dir = cfg.get("run_dir")
    if run_dir and not episodes_file(str(run_dir)).is_file():  # both files: RunFolderError, a user error
        raise ConfigError(
            f"run_dir={run_dir}: no {' or '.join(EPISODES_FILES)} there; run_dir must be a `rescue rollout` folder "
            "(or leave run_dir unset and give data.path=DIALOGUES)"
        )


def task_config(config: DictConfig) -> DictConfig:
    """The job's config without the ``hydra`` node (what the task function receives)."""
    task = copy.deepcopy(config)
    with read_write(task), open_dict(task):
        task.pop("hydra", None)
    return task


def check_config(config: DictConfig, command: str, output_dir: str | None) -> None:
    """Every check of a composed config (``config`` includes the ``hydra`` node)."""
    from rescue_env.experiments.run_record import check_run_folder

    task = task_config(config)
    check_secrets(task)
    check_schema(task)
    if command == "judge":
        _check_judge(task)
    if output_dir:
        check_run_folder(command, task, Path(output_dir))


def _sweep_job_configs(config: DictConfig, config_name: str | None) -> list[DictConfig]:
    """The task configs of a basic sweep's jobs (composed as Hydra's sweeper will); empty for
    another sweeper, or if they cannot be listed here (the per-job check still runs)."""
    sweeper = str(OmegaConf.select(config, "hydra.sweeper._target_") or "")
    if not sweeper.endswith("BasicSweeper"):
        return []
    try:
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.override_parser.overrides_parser import OverridesParser

        loader = GlobalHydra.instance().config_loader()
        parsed = OverridesParser.create(config_loader=loader).parse_overrides(list(config.hydra.overrides.task))
        batches = BasicSweeper.split_arguments(parsed, None)
        return [
            task_config(loader.load_configuration(config_name, job, run_mode=RunMode.MULTIRUN))
            for batch in batches for job in batch
        ]
    except Exception:  # private Hydra API moved: fall back to the per-job check
        return []


class ConfigGuard(Callback):
    """Refuse a bad config before Hydra writes anything (see the module docstring)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        mark_composed()
        name = kwargs.get("config_name") or str(OmegaConf.select(config, "hydra.job.config_name") or "")
        self._check(config, name, str(OmegaConf.select(config, "hydra.run.dir")))

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        mark_composed()
        try:
            check_secrets(task_config(config))
            # every job's settings, before the first job runs or writes anything
            for job in _sweep_job_configs(config, kwargs.get("config_name")):
                check_secrets(job)
                check_schema(job)
        except UserError as exc:
            fail(str(exc), exc)
        except Exception:
            traceback.print_exc()
            raise SystemExit(EXIT_BUG) from None

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            mark_composed()
            name = str(OmegaConf.select(config, "hydra.job.config_name") or "")
            # exiting here would take a joblib worker, and the jobs in flight, down with it
            try:
                check_config(config, name, str(OmegaConf.select(config, "hydra.runtime.output_dir")))
            except USER_ERRORS as exc:
                sweep.refuse_job(EXIT_USER_ERROR, str(exc))
            except Exception as exc:
                traceback.print_exc()
                sweep.refuse_job(EXIT_BUG, f"{type(exc).__name__}: {exc}")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        """Name the jobs that failed and set the sweep's exit code."""
        outcome = sweep.sweep_outcome(Path(str(config.hydra.sweep.dir)))
        for line in sweep.describe(outcome):
            print(line, file=sys.stderr)
        record_outcome(outcome.exit_code)

    @staticmethod
    def _check(config: DictConfig, command: str, output_dir: str | None) -> None:
        try:
            check_config(config, command, output_dir)
        except USER_ERRORS as exc:
            fail(str(exc), exc)
        except Exception:  # a bug here must stop the run: Hydra would only warn and go on
            traceback.print_exc()
            raise SystemExit(EXIT_BUG) from None
