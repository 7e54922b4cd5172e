"""Optional experiment tracking for ``rescue train``: MLflow or Weights & Biases, offline by
default (``tracking=mlflow`` / ``tracking=wandb``; ``tracking=none`` is the default).

:func:`start` opens a run with the job's hyper-parameters and returns a
:class:`TrackingWriter`, an SB3 ``KVWriter`` that forwards every scalar SB3 logs (the same
``charts/``, ``losses/``, ``sigma/``, ``final/`` tags as TensorBoard) to the tracker;
:meth:`TrackingWriter.close` ends the run.

- MLflow: ``tracking.uri`` (default ``file:RUN/mlruns``, a local file store; MLflow 3 keeps
  that store in maintenance mode and refuses it unless ``MLFLOW_ALLOW_FILE_STORE=true``,
  which is set for a ``file:`` URI) and experiment ``tracking.project``. Install
  ``pip install ".[tracking]"`` (``mlflow-skinny``).
- W&B: ``wandb.init(project=tracking.project, mode=tracking.mode, dir=RUN)``; ``mode=offline``
  (default) writes ``RUN/wandb/offline-run-*`` for a later ``wandb sync``. Install
  ``pip install wandb``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from stable_baselines3.common.logger import KVWriter

BACKENDS = ("mlflow", "wandb")


class TrackingWriter(KVWriter):
    """Forwards SB3's scalar log values to an MLflow or W&B run."""

    def __init__(self, backend: str, handle: Any):
        self.backend = backend
        self.handle = handle  # the mlflow module / the wandb Run

    def write(self, key_values: dict[str, Any], key_excluded: dict[str, Any], step: int = 0) -> None:
        scalars = {k: float(v) for k, v in key_values.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if not scalars:
            return
        if self.backend == "mlflow":
            self.handle.log_metrics(scalars, step=step)
        else:
            self.handle.log(scalars, step=step)

    def close(self) -> None:
        if self.handle is None:
            return
        if self.backend == "mlflow":
            self.handle.end_run()
        else:
            self.handle.finish()
        self.handle = None


def start(tracking: Any, out: Path, run_name: str, hparams: dict[str, Any]) -> TrackingWriter | None:
    """Open a tracking run for ``tracking`` (the config's ``tracking`` group); None when
    ``tracking.backend`` is null. Raises ``ImportError`` naming the package to install."""
    backend = tracking.backend
    if backend is None:
        return None
    if backend not in BACKENDS:
        raise ValueError(f"unknown tracking backend {backend!r}: use tracking=mlflow, tracking=wandb or tracking=none")
    if backend == "mlflow":
        try:
            import mlflow
        except ImportError as exc:
            raise ImportError('tracking=mlflow needs MLflow: pip install ".[tracking]" (mlflow-skinny)') from exc
        uri = tracking.uri or f"file:{(out / 'mlruns').resolve()}"
        if uri.startswith("file:"):
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        mlflow.set_tracking_uri(uri)
        mlflow.set_experiment(tracking.project)
        mlflow.start_run(run_name=run_name)
        mlflow.log_params(hparams)
        return TrackingWriter("mlflow", mlflow)
    try:
        import wandb
    except ImportError as exc:
        raise ImportError("tracking=wandb needs Weights & Biases: pip install wandb") from exc
    run = wandb.init(project=tracking.project, name=run_name, mode=tracking.mode, dir=str(out), config=hparams)
    return TrackingWriter("wandb", run)
