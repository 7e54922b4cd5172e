"""The frontier of grounded training: σ* margin over the heuristic against agreement with
real therapists, one point per ``prior.coef`` (``rescue summarize`` draws it as
``frontier.png`` when the runs carry ``real_agreement``; see the README's "Grounded
training")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rescue_env.atomic import save_figure


def plot_frontier(result: dict[str, Any], path: Path) -> Path:
    """Two panels (STP R@1 and SSP R@1 on held-out real dialogues, x) against the σ* margin over
    the heuristic on held-out simulated episodes (y), one point per group of the summary
    (mean over seeds, labelled by its swept settings); the behaviour prior's and the majority
    baseline's agreement drawn as vertical lines for reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = result["group_by"]
    rows = [r for r in result["rows"] if r["agent"] == "policy" and "stp_r1" in r]
    prior = [r for r in result["rows"] if r["agent"] == "imitation" and "stp_r1" in r]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    for ax, metric, label in zip(axes, ("stp_r1", "ssp_r1"), ("STP R@1 % (whom)", "SSP R@1 % (which strategy)")):
        pts = sorted(rows, key=lambda r: r[metric])
        ax.plot([r[metric] for r in pts], [r["delta_mean"] for r in pts], "o", color="tab:blue", label="policy")
        for r in pts:
            ax.annotate(" ".join(f"{k.split('.')[-1]}={r[k]}" for k in by), (r[metric], r["delta_mean"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
        if prior:
            ax.axvline(sum(r[metric] for r in prior) / len(prior), color="tab:green", ls="--", label="behaviour prior")
        majority = [r[f"majority_{metric}"] for r in rows if f"majority_{metric}" in r]
        if majority:
            ax.axvline(sum(majority) / len(majority), color="tab:red", ls=":", label="majority baseline")
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xlabel(f"{label}, held-out real dialogues")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("σ* margin over the heuristic\n(held-out simulated episodes)")
    fig.suptitle("Grounded training: simulated return vs agreement with real therapists")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)
    return path
