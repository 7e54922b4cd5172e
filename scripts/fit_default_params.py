"""Refit the packaged default dynamics parameters (rescue_env/dynamics/default_params.json).

    python scripts/fit_default_params.py [--out FILE] [--with-seeds] DATA ...

Fits on the real data sets given (files, directories of JSON Lines files or of per-sample
.json files). The bundled seeds weigh nothing in the packaged defaults unless
``--with-seeds`` adds them as dialogues like any other: they were written for the project,
so their clients' numbers are the authors' guesses, which the clinical priors already hold;
a fit of real clients should rest on real clients (they remain the envs' episode starts). The shipped defaults name theirs in the provenance
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
    parser.add_argument("extra", nargs="*", help="real data sets to fit on")
    parser.add_argument("--with-seeds", action="store_true", help="fit on the bundled seeds too (one dialogue each, like real ones)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"parameter file to write (default: {OUT})")
    args = parser.parse_args(argv)
    paths = [None, *args.extra] if args.with_seeds else list(args.extra)  # None = the bundled seeds
    if not paths:
        parser.error("name at least one real data set (or --with-seeds)")
    dialogues = []
    sources = []
    for path in paths:
        ds = load_dialogues(path)
        dialogues += ds
        sources += data_sources(path, ds)
    params = fit_params(dialogues, sources=[f"{s['path']}: {s['dialogues']} dialogues" for s in sources], base=prior_params())
    params.provenance["data"] = sources
    params.provenance["command"] = shlex.join(["python", "scripts/fit_default_params.py", *(["--with-seeds"] if args.with_seeds else []), *args.extra])
    params.provenance["seeds_weight"] = 1.0 if args.with_seeds else 0.0
    params.provenance["notes"] = (
        "Packaged defaults: counts from the data above (numbers only, no text) shrunk toward the "
        "clinical priors of rescue_env.dynamics.priors (DESIGN.md §1 transition facts), the simulated "
        "means matched to the data by simulation. The bundled seeds weigh "
        + ("as much as a real dialogue each" if args.with_seeds else "nothing")
        + " (seeds_weight): they were written for the project, their clients are the authors' guesses, "
        "which the priors already hold; a fit of real clients rests on real clients. Regenerate with the "
        "command above (from the repository root, the data beside it), or fit your own with `rescue calibrate data.path=...`."
    )
    params.save(args.out)
    print(f"wrote {args.out} from {len(dialogues)} dialogues: {', '.join(s['path'] for s in sources)}")


if __name__ == "__main__":
    main()
