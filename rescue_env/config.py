"""The environment settings: one typed, frozen list, taken by every env and command.

:class:`EnvConfig` is the only place the env settings are listed. The Gymnasium env, the
vector envs and the PettingZoo env take one (``config=``) or its fields as keyword
arguments; ``rescue train`` and ``rescue rollout`` build one from the Hydra ``env`` group,
whose schema is derived from this class (:func:`hydra_schema`).

What an env is built from besides the settings are its inputs: the seed data
(``data_path``), the client model (``dynamics``, ``params``, ``heterogeneity``) and the reward
weights (``reward``, a :class:`~rescue_env.reward.RewardConfig`). :class:`EnvSpec` holds the
settings and the inputs together; every adapter takes its fields as keyword arguments (or a
ready ``spec=``), builds one with :meth:`EnvSpec.of`, and passes it on.
"""

# no ``from __future__ import annotations``: OmegaConf reads these annotations as types
import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

SCENARIOS = ("couple", "family")
RENDER_MODES = ("ansi", "rgb_array")


@dataclass(frozen=True)
class EnvConfig:
    """Settings of a group-support environment.

    Attributes:
        scenario: ``"couple"`` or ``"family"``.
        horizon: steps before the episode is truncated.
        max_members: the group-size cap of the spaces (family: 2..8, default 6; couple: 2..3,
            default 2). A seed dialogue with a larger group is refused by name, never cut.
        min_prefix: fewest seed rows before the simulation starts (the cut is drawn from
            ``min_prefix`` to the dialogue's last row).
        settle_threshold: the group has settled when every member's distress stays below
            this ...
        settle_steps: ... for this many consecutive steps.
        terminate_on_settle: end the episode (``terminated``) when the group settles.
        record_transcript: build benchmark rows (the transcript) each step; off for training.
        render_mode: ``"ansi"``, ``"rgb_array"`` or ``None``.
    """

    scenario: str = "couple"
    horizon: int = 30
    max_members: Optional[int] = None
    min_prefix: int = 2
    settle_threshold: float = 0.2
    settle_steps: int = 3
    terminate_on_settle: bool = True
    record_transcript: bool = False
    render_mode: Optional[str] = None

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {self.scenario!r}: expected one of {SCENARIOS}")
        for name in ("horizon", "settle_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"env {name} must be an integer ≥ 1, got {value!r}")
        if isinstance(self.min_prefix, bool) or not isinstance(self.min_prefix, int) or self.min_prefix < 0:
            raise ValueError(f"env min_prefix must be an integer ≥ 0, got {self.min_prefix!r}")
        if isinstance(self.settle_threshold, bool) or not isinstance(self.settle_threshold, (int, float)) or not self.settle_threshold >= 0.0:
            # distress lies in [0, 1]: 0 never settles, above 1 settles after settle_steps
            raise ValueError(f"env settle_threshold must be a number ≥ 0, got {self.settle_threshold!r}")
        if self.render_mode is not None and self.render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode {self.render_mode!r} not supported; use one of {RENDER_MODES}")
        if self.render_mode == "ansi" and not self.record_transcript:
            # the ANSI view prints the transcript
            object.__setattr__(self, "record_transcript", True)

    @classmethod
    def of(cls, config: "EnvConfig | Mapping[str, Any] | None" = None, **settings: Any) -> "EnvConfig":
        """An :class:`EnvConfig` from a config (or a mapping such as the Hydra ``env``
        group) with ``settings`` applied on top; unknown names raise ``TypeError``."""
        if config is None:
            base: dict[str, Any] = {}
        elif isinstance(config, EnvConfig):
            base = dataclasses.asdict(config)
        else:
            base = dict(config)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(base) - known | set(settings) - known)
        if unknown:
            raise TypeError(f"unknown env setting(s) {unknown}; the settings are {sorted(known)}")
        base.update(settings)
        return cls(**base)

    def replace(self, **changes: Any) -> "EnvConfig":
        """A copy with ``changes`` (validated)."""
        return dataclasses.replace(self, **changes)


def check_heterogeneity(value: Any) -> float:
    """``dynamics.heterogeneity`` as a float: a finite number ≥ 0 (``ValueError`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0.0 <= float(value) < math.inf):
        raise ValueError(f"heterogeneity (dynamics.heterogeneity) must be a finite number >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class EnvSpec:
    """Everything an env is built from: its settings and its inputs, listed once.

    Attributes:
        config: the settings (:class:`EnvConfig`).
        dynamics: ``"calibrated"``, or a client-model object whose clients answer after the
            calibrated transition (a :class:`~rescue_env.dynamics.base.ClientBackend`, e.g.
            an :class:`~rescue_env.llm.backend.LLMBackend`).
        params: the calibrated model's parameters (object or file; packaged defaults when
            ``None``).
        data_path: seed dialogues: a path, a list of paths or of
            :class:`~rescue_env.data.schema.Dialogue`, or ``None`` (the bundled seeds).
        reward: σ*'s weights (a :class:`~rescue_env.reward.RewardConfig` or a dict of them).
        heterogeneity: spread of the clients drawn at reset (``dynamics.heterogeneity``:
            0 = the mean client, 1 = the fitted population, > 1 wider, for domain
            randomisation); see :mod:`rescue_env.dynamics.calibrated`.
    """

    config: EnvConfig
    dynamics: Any = "calibrated"
    params: Any = None
    data_path: Any = None
    reward: Any = None
    heterogeneity: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "heterogeneity", check_heterogeneity(self.heterogeneity))

    @classmethod
    def of(cls, scenario: Optional[str] = None, spec: "EnvSpec | None" = None, **kwargs: Any) -> "EnvSpec":
        """The spec of an adapter's arguments: ``scenario``, the inputs by name, and the
        settings as ``config=`` and/or keywords (see :meth:`EnvConfig.of`); or a ready
        ``spec`` alone. Unknown names raise ``TypeError``."""
        if spec is not None:
            if scenario is not None or kwargs:
                raise TypeError(f"pass spec= alone, or the settings and inputs without it (got spec= and {sorted(kwargs) or ['scenario']})")
            return spec
        inputs = {f.name: kwargs.pop(f.name) for f in fields(cls) if f.name != "config" and f.name in kwargs}
        config = kwargs.pop("config", None)
        if scenario is not None:
            kwargs["scenario"] = scenario
        return cls(EnvConfig.of(config, **kwargs), **inputs)


def hydra_schema(cls: type, name: Optional[str] = None) -> type:
    """A mutable dataclass with the fields of the frozen dataclass ``cls`` (e.g.
    :class:`EnvConfig`), for Hydra's config store: Hydra merges command-line overrides into
    its nodes, which a frozen dataclass would refuse. The fields stay listed once, in ``cls``."""
    return dataclasses.make_dataclass(
        name or cls.__name__,
        [(f.name, f.type, dataclasses.field(default=f.default)) for f in fields(cls)],
        namespace={
            "__doc__": f"Hydra schema of {cls.__module__}.{cls.__qualname__} (see there).",
            # building the schema object (OmegaConf.to_object, as the config guard does)
            # runs ``cls``'s own checks: the ranges stay written once, in ``cls``
            "__post_init__": lambda self: cls(**{f.name: getattr(self, f.name) for f in fields(cls)}),
        },
    )
