"""Helpers every Hydra entry point shares: the run folder and data loading."""

from __future__ import annotations

from pathlib import Path

from hydra.core.hydra_config import HydraConfig

from typing import Any

from rescue_env.data import Dialogue, check_group_sizes, describe_data_path, load_dialogues


def run_dir() -> Path:
    """The Hydra run folder of this job (``hydra.run.dir`` / the sweep subdir)."""
    return Path(HydraConfig.get().runtime.output_dir)


def load_data(path: Any, strict: bool = False) -> tuple[list[Dialogue], str]:
    """Dialogues of ``data.path`` (bundled seeds when null; a path or a list of paths, see
    :func:`rescue_env.data.load_dialogues`) and a printable source name."""
    return load_dialogues(path, strict=strict), describe_data_path(path)


def load_playable(path: Any, strict: bool, max_members: int | None, scenario: str | None = None) -> tuple[list[Dialogue], str]:
    """:func:`load_data` for a command that plays the dialogues in envs of ``max_members``
    (``env.max_members``): only ``scenario``'s dialogues when given, and a
    :class:`~rescue_env.data.GroupSizeError` naming every group an env could not hold, before
    anything runs (a member is never dropped)."""
    dialogues, source = load_data(path, strict)
    if scenario is not None:
        dialogues = [d for d in dialogues if d.scenario == scenario]
    check_group_sizes(dialogues, max_members)
    return dialogues, source
