"""Refit the packaged default dynamics parameters (rescue_env/dynamics/default_params.json).

    python scripts/fit_default_params.py [--out FILE] [EXTRA_DATA ...]

Fits on the bundled seeds plus the extra data sets given (files, directories of JSON Lines
files or of per-sample .json files). The shipped defaults name theirs in the provenance
(``provenance["data"]``: each path, its sha256 and how many dialogues came from it; plus the
command and the date): only numbers derived from the data are stored, no text. Writes the
packaged file unless ``--out`` names another (a candidate to compare before swapping it in).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from rescue_env.data import data_sources, load_dialogues
from rescue_env.dynamics.fit import fit_params, prior_params

OUT = Path(__file__).resolve().parents[1] / "rescue_env" / "dynamics" / "default_params.json"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Refit the packaged default dynamics parameters.")
    parser.add_argument("extra", nargs="*", help="real data sets fitted with the bundled seeds")
    parser.add_argument("--out", type=Path, default=OUT, help=f"parameter file to write (default: {OUT})")
    args = parser.parse_args(argv)
    paths = [None, *args.extra]  # None = the bundled seeds
    dialogues = []
    sources = []
    for path in paths:
        ds = load_dialogues(path)
        dialogues += ds
        sources += data_sources(path, ds)
    params = fit_params(dialogues, sources=[f"{s['path']}: {s['dialogues']} dialogues" for s in sources], base=prior_params())
    params.provenance["data"] = sources
    params.provenance["command"] = shlex.join(["python", "scripts/fit_default_params.py", *args.extra])
    params.provenance["notes"] = (
        "Packaged defaults: counts from the data above (numbers only, no text) shrunk toward the "
        "clinical priors of rescue_env.dynamics.priors (DESIGN.md §1 transition facts). Regenerate "
        "with the command above, or fit your own with `rescue calibrate data.path=...`."
    )
    params.save(args.out)
    print(f"wrote {args.out} from {len(dialogues)} dialogues: {', '.join(s['path'] for s in sources)}")


if __name__ == "__main__":
    main()
