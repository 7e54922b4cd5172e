"""Refit the packaged default dynamics parameters (rescue_env/dynamics/default_params.json).

    python scripts/fit_default_params.py [EXTRA_DATA ...]

Fits on the bundled seeds plus any extra data sets given (the shipped defaults used the
real RESCUE-BENCH subset, ../shared/data/rescue-bench-subset/benchmark_subset.jsonl: only
numbers derived from it are stored, no text).
"""

from __future__ import annotations

import sys
from pathlib import Path

from rescue_env.data import bundled_seeds_path, load_dialogues
from rescue_env.dynamics.fit import fit_params, prior_params

OUT = Path(__file__).resolve().parents[1] / "rescue_env" / "dynamics" / "default_params.json"


def main(extra: list[str]) -> None:
    dialogues = load_dialogues()
    sources = [f"bundled seeds ({bundled_seeds_path().name}: {len(dialogues)} dialogues)"]
    for path in extra:
        ds = load_dialogues(path)
        dialogues += ds
        sources.append(f"{Path(path).name}: {len(ds)} dialogues (numbers only, no text)")
    params = fit_params(dialogues, sources=sources, base=prior_params())
    params.provenance["notes"] = (
        "Packaged defaults: counts from the sources above shrunk toward the clinical priors of "
        "rescue_env.dynamics.priors (DESIGN.md §1 transition facts). Regenerate with "
        "scripts/fit_default_params.py, or fit your own with `rescue calibrate data.path=...`."
    )
    params.save(OUT)
    print(f"wrote {OUT} from {len(dialogues)} dialogues")


if __name__ == "__main__":
    main(sys.argv[1:])
