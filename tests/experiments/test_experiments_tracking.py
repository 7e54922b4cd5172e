"""``rescue train tracking=...``: MLflow offline (a file store in the run folder) receives the
hyper-parameters and the same scalars as TensorBoard; W&B without its package fails clearly."""

from __future__ import annotations

import importlib.util

import pytest


def test_mlflow_file_store_gets_params_and_metrics(rescue, tiny_train, tmp_path):
    pytest.importorskip("mlflow")
    out = tmp_path / "run"
    run = rescue(["train", f"hydra.run.dir={out}", *tiny_train, "tracking=mlflow", "progress=false"])
    assert run.rc == 0, run.err[-3000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"file:{(out / 'mlruns').resolve()}")
    experiment = client.get_experiment_by_name("rescue-env")
    (tracked,) = client.search_runs([experiment.experiment_id])
    assert tracked.data.params["algo"] == "maskable_ppo" and tracked.data.params["n_envs"] == "2"
    metrics = tracked.data.metrics
    assert {"sigma/sigma_return_mean", "final/sigma_return_mean", "final/paired_vs_heuristic"} <= set(metrics)
    assert tracked.info.status == "FINISHED"
    history = client.get_metric_history(tracked.info.run_id, "sigma/sigma_return_mean")
    assert sorted(m.step for m in history) == [128, 256]


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
def test_wandb_without_its_package_names_the_install(rescue, tiny_train, tmp_path):
    run = rescue(["train", f"hydra.run.dir={tmp_path / 'w'}", *tiny_train, "tracking=wandb", "progress=false"])
    assert run.rc != 0 and "pip install wandb" in run.err
