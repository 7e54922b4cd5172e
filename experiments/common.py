"""Helpers every Hydra entry point shares: the run folder and data loading."""

from __future__ import annotations

from pathlib import Path

from hydra.core.hydra_config import HydraConfig

from rescue_env.data import Dialogue, load_dialogues, resolve_data_path


def run_dir() -> Path:
    """The Hydra run folder of this job (``hydra.run.dir`` / the sweep subdir)."""
    return Path(HydraConfig.get().runtime.output_dir)


def load_data(path: str | None, strict: bool = False) -> tuple[list[Dialogue], str]:
    """Dialogues of ``data.path`` (bundled seeds when null) and a printable source name."""
    return load_dialogues(path, strict=strict), str(resolve_data_path(path))
