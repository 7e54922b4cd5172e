"""``rescue calibrate``: fit the calibrated client model on ``data.path`` and report fidelity.

``data.path`` may name several data sets (``data.path=[A,B]`` or a directory of ``.jsonl``
files); the parameter file's provenance lists each with its sha256.

Writes to the run folder: the parameter file (``dynamics_params.json``, usable as
``dynamics.params=...``), ``fidelity.json`` and ``fidelity.png``; prints the fidelity table.
"""

from __future__ import annotations

import json
import logging
import time

import hydra
from omegaconf import DictConfig

from experiments.common import load_data, run_dir
from experiments.config import register_configs
from experiments.errors import user_errors
from rescue_env.atomic import atomic_write_text
from rescue_env.data import data_sources, group_cap
from rescue_env.dynamics.fidelity import evaluate_fidelity, format_fidelity, plot_fidelity
from rescue_env.dynamics.fit import fit_params

log = logging.getLogger(__name__)
register_configs()


@hydra.main(version_base="1.3", config_path="pkg://conf", config_name="calibrate")
@user_errors
def main(cfg: DictConfig) -> None:
    t0 = time.perf_counter()
    out = run_dir()
    dialogues, source = load_data(cfg.data.path, cfg.data.strict)
    sources = data_sources(cfg.data.path, dialogues)
    params = fit_params(dialogues, sources=[f"{s['path']}: {s['dialogues']} dialogues" for s in sources])
    params.provenance["data"] = sources
    # the fit uses every member of every group; say which groups an env of today's default size cannot play
    for d in dialogues:
        n = len(d.participants)
        if n > group_cap(d.scenario):
            print(f"note: {d.scenario} sample {d.sample_id!r} has {n} members ({', '.join(d.participants)}): fitted on all of them; "
                  f"an env plays it only with env.max_members>={n}")
    path = params.save(out / cfg.output)
    results = [evaluate_fidelity(dialogues, s, folds=cfg.folds, seed=cfg.seed, sim_draws=cfg.sim_draws) for s in ("couple", "family")]
    results = [r for r in results if r.dialogues]
    table = format_fidelity(results)
    print(table)
    atomic_write_text(out / "fidelity.json", json.dumps({"source": source, "scenarios": [r.to_dict() for r in results]}, indent=1))
    if results:
        plot_fidelity(results, out / "fidelity.png")
    small = [f"{r.scenario}: {r.dialogues} dialogues" for r in results if r.dialogues < 30]
    if small:
        print(f"caveat: small data ({', '.join(small)}); held-out figures are noisy")
    print(f"parameters: {path}\nfidelity: {out / 'fidelity.json'}, {out / 'fidelity.png'}  ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
