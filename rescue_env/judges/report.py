"""Judge outputs on disk: plots, the run report's judge section, and the files of a run.

- ``plots/judge_hist.png``: distribution of overall scores per agent (one panel each; vetoes,
  which score 0, are counted in the panel title).
- ``plots/judge_heatmap.png``: mean dimension score, agent × dimension.
- :func:`insert_into_report` adds a self-contained judge section (images as base64) to a
  run's ``report.html``: at a ``<!-- judge -->`` marker if there is one, else before
  ``</body>``; a section from an earlier judge run is replaced, not duplicated.

Titles and the section heading name the scorer, so an offline heuristic figure is never
mistaken for an LLM judgement.
"""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from rescue_env.atomic import atomic_open, atomic_write_text, save_figure
from rescue_env.judges.rubric import DIMENSIONS, MAX_SCORE, OFFLINE_SCORER

MARKER = "<!-- judge -->"
BEGIN, END = "<!-- judge:begin -->", "<!-- judge:end -->"


def scorer_title(scorer: str) -> str:
    return "offline heuristic (not an LLM judgement)" if scorer == OFFLINE_SCORER else "LLM judge"


def _absolute(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("mode") == "absolute" and r.get("kind") == "item" and r.get("ok")]


def plot_histogram(
    records: Sequence[Mapping[str, Any]], path: str | Path, scorer: str, agents: Sequence[str] = ()
) -> Path:
    """Overall-score histogram per agent (absolute records only); ``agents`` adds panels for
    agents without judged replies (a never-intervening agent)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    recs = _absolute(records)
    agents = sorted({str(r["agent"]) for r in recs} | set(agents)) or ["(no items)"]
    n = len(agents)
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 2.4 * rows + 0.6), squeeze=False, sharex=True)
    bins = np.linspace(0, MAX_SCORE, 4 * MAX_SCORE + 1)
    for k, agent in enumerate(agents):
        ax = axes[k // cols][k % cols]
        vals = [float(r["overall"]) for r in recs if r["agent"] == agent]
        vetoes = sum(1 for r in recs if r["agent"] == agent and r.get("veto"))
        if not vals:
            ax.text(0.5, 0.5, "no therapist replies", ha="center", va="center", transform=ax.transAxes, color="gray")
            ax.set_yticks([])
        ax.hist(vals, bins=bins, color="#4C72B0", edgecolor="white")
        if vetoes:
            ax.hist([0.0] * vetoes, bins=bins, color="#C44E52", edgecolor="white", label="veto")
            ax.legend(loc="upper left", fontsize=8)
        mean = f", mean {sum(vals) / len(vals):.2f}" if vals else ""
        ax.set_title(f"{agent} (n={len(vals)}{mean}, vetoes={vetoes})", fontsize=9)
        ax.set_xlim(0, MAX_SCORE)
        ax.set_ylabel("replies")
    for k in range(n, rows * cols):
        axes[k // cols][k % cols].axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("overall score (0-4)")
    fig.suptitle(f"Overall support-quality score per agent — {scorer_title(scorer)}", fontsize=10)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out, dpi=110)
    plt.close(fig)
    return out


def plot_heatmap(summary: Mapping[str, Any], path: str | Path) -> Path:
    """Agent × dimension mean score heatmap from the absolute summary."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    per_agent = (summary.get("absolute") or {}).get("per_agent") or {}
    agents = sorted(per_agent) or ["(no items)"]
    mat = np.full((len(agents), len(DIMENSIONS)), np.nan)
    for i, a in enumerate(agents):
        for j, d in enumerate(DIMENSIONS):
            v = (per_agent.get(a) or {}).get("dimensions", {}).get(d, {}).get("mean")
            if v is not None:
                mat[i, j] = v
    fig, ax = plt.subplots(figsize=(1.3 * len(DIMENSIONS) + 2.5, 0.55 * len(agents) + 1.6))
    im = ax.imshow(mat, vmin=0, vmax=MAX_SCORE, cmap="RdYlGn", aspect="auto")
    ax.set_xticks(range(len(DIMENSIONS)), DIMENSIONS, rotation=20, ha="right")
    ax.set_yticks(range(len(agents)), agents)
    for i in range(len(agents)):
        for j in range(len(DIMENSIONS)):
            if not np.isnan(mat[i, j]):
                ax.text(j, i, f"{mat[i, j]:.2f}", ha="center", va="center", fontsize=8)
    fig.colorbar(im, ax=ax, label="mean score (0-4)")
    ax.set_title(f"Mean dimension score — {scorer_title(str(summary.get('scorer', '')))}", fontsize=10)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, out, dpi=110)
    plt.close(fig)
    return out


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(path.stem)}" style="max-width:100%" src="data:image/png;base64,{data}">'


def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:.2f}"
    return html.escape(str(x))


def html_section(summary: Mapping[str, Any], plots: Sequence[Path]) -> str:
    """The judge section (one ``<section>``, self-contained) for a run report."""
    scorer = str(summary.get("scorer", ""))
    parts = [BEGIN, '<section id="judge">', f"<h2>Support quality — {html.escape(scorer_title(scorer))}</h2>"]
    if scorer == OFFLINE_SCORER:
        parts.append(
            "<p><strong>Scorer: offline-heuristic.</strong> These scores come from lexical cues, not from an "
            "LLM or a human; they order clearly good and poor replies but read words, not meaning.</p>"
        )
    else:
        parts.append(
            f"<p>Scorer: LLM judge ({html.escape(str(summary.get('judge_model') or 'model from config'))}, "
            f"temperature {_fmt(summary.get('temperature'))}).</p>"
        )
    ab = summary.get("absolute")
    if ab:
        parts.append(
            "<table><tr><th>agent</th><th>replies</th><th>overall</th><th>overall excl. veto</th><th>vetoes</th>"
            + "".join(f"<th>{d}</th>" for d in DIMENSIONS)
            + "<th>length–score r</th></tr>"
        )
        for agent, s in ab["per_agent"].items():
            parts.append(
                f"<tr><td>{html.escape(agent)}</td><td>{s['n']}</td><td>{_fmt(s['overall_mean'])}</td>"
                f"<td>{_fmt(s['overall_mean_excl_veto'])}</td><td>{s['veto_count']}</td>"
                + "".join(f"<td>{_fmt(s['dimensions'][d]['mean'])}</td>" for d in DIMENSIONS)
                + f"<td>{_fmt(s['length_score_correlation']['spearman'])}</td></tr>"
            )
        parts.append("</table>")
        an = ab["anchors"]
        corr = ab["length_score_correlation"]
        parts.append(
            f"<p>Run length–score correlation: Spearman {_fmt(corr['spearman'])}, Pearson {_fmt(corr['pearson'])} "
            f"(n={corr['n']}). Anchors ({html.escape(an['mode'])}): mean anchor MAE {_fmt(an['mean_anchor_mae'])}, "
            f"flagged batches {an['n_flagged']} of {an['n_batches']}.</p>"
        )
    parts.extend(f"<figure>{_img(p)}</figure>" for p in plots if p.exists())
    pw = summary.get("pairwise")
    if pw:
        pb = pw["position_bias"]
        parts.append(f"<h3>Pairwise ({pw['n_pairs']} pairs, {pw['n_exact']} exact)</h3><table>"
                     "<tr><th>pair</th><th>wins</th><th>ties</th><th>inconsistent</th></tr>")
        for key, row in pw["wins"].items():
            wins = ", ".join(f"{html.escape(k)} {v}" for k, v in row.items()
                             if k not in ("tie", "inconsistent", "failed", "n") and not k.endswith("_win_rate"))
            parts.append(f"<tr><td>{html.escape(key)}</td><td>{wins}</td><td>{row['tie']}</td><td>{row['inconsistent']}</td></tr>")
        parts.append(
            f"</table><p>Position bias: first-shown reply chosen in {_fmt(pb['first_position_share'])} of "
            f"decided verdicts (0.50 = none); order consistency {_fmt(pb['consistency'])}"
            + ("" if pb.get("applicable", True) else " (not applicable to the offline scorer)") + ".</p>"
        )
    tw = summary.get("twins")
    if tw:
        parts.append("<h3>Perturbed twins</h3><table><tr><th>agent</th><th>twin</th><th>n</th><th>mean |gap|</th>"
                     "<th>mean similarity</th><th>template share</th></tr>")
        for agent, roles in tw["per_agent"].items():
            for role, s in roles.items():
                parts.append(
                    f"<tr><td>{html.escape(agent)}</td><td>{role}</td><td>{s['n']}</td><td>{_fmt(s['mean_abs_gap'])}</td>"
                    f"<td>{_fmt(s['mean_similarity'])}</td><td>{_fmt(s['template_share'])}</td></tr>"
                )
        parts.append(f"</table><p>{html.escape(tw['responder_note'])}</p>")
    clp = (summary.get("closed_loop") or {}).get("per_agent")
    if clp:
        parts.append("<h3>Closed loop</h3><table><tr><th>agent</th><th>episodes</th><th>group distress ↓</th>"
                     "<th>worst-off ↓</th><th>healthy path</th><th>advice given</th><th>explored before advice</th>"
                     "<th>advice position</th></tr>")
        for agent, s in clp.items():
            parts.append(
                f"<tr><td>{html.escape(agent)}</td><td>{s['episodes']}</td><td>{_fmt(s['group_reduction'])}</td>"
                f"<td>{_fmt(s['worst_off_reduction'])}</td><td>{_fmt(s['healthy_share'])}</td><td>{_fmt(s['advice_share'])}</td>"
                f"<td>{_fmt(s['explored_before_advice_share'])}</td><td>{_fmt(s['advice_position'])}</td></tr>"
            )
        parts.append("</table>")
    parts.extend(["</section>", END])
    return "\n".join(parts)


def insert_into_report(report_path: str | Path, section: str) -> bool:
    """Put ``section`` into an existing ``report.html``; returns False if there is none."""
    p = Path(report_path)
    if not p.is_file():
        return False
    text = p.read_text(encoding="utf-8")
    text = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END) + r"\n?", "", text, flags=re.S)
    if MARKER in text:
        text = text.replace(MARKER, MARKER + "\n" + section, 1)
    else:
        m = list(re.finditer(r"</body\s*>", text, flags=re.I))
        if m:
            k = m[-1].start()
            text = text[:k] + section + "\n" + text[k:]
        else:
            text = text + "\n" + section + "\n"
    atomic_write_text(p, text)
    return True


def write_outputs(out_dir: str | Path, records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any],
                  closed_loop: Sequence[Mapping[str, Any]], *, update_report: bool = True) -> dict[str, Path]:
    """Write every judge output into ``out_dir``; returns the paths by name.

    ``judgements.jsonl``, ``judge_scores.csv`` (absolute item scores in the agreement CSV
    shape, rater ``judge``), ``closed_loop.jsonl``, ``judge_summary.json`` and the two plots;
    the judge section goes into ``report.html`` when the folder has one.
    """
    from rescue_env.judges.agreement import judge_ratings_from_judgements, write_scores_csv

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    paths["judgements"] = out / "judgements.jsonl"
    with atomic_open(paths["judgements"]) as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    paths["scores_csv"] = write_scores_csv(judge_ratings_from_judgements(records), out / "judge_scores.csv")
    paths["closed_loop"] = out / "closed_loop.jsonl"
    with atomic_open(paths["closed_loop"]) as fh:
        for e in closed_loop:
            fh.write(json.dumps(e, ensure_ascii=False) + "\n")
    plots = []
    if "absolute" in summary.get("modes", []):
        agents = list((summary.get("absolute") or {}).get("per_agent", {}))
        paths["hist"] = plot_histogram(records, out / "plots" / "judge_hist.png", str(summary.get("scorer")), agents)
        paths["heatmap"] = plot_heatmap(summary, out / "plots" / "judge_heatmap.png")
        plots = [paths["hist"], paths["heatmap"]]
    paths["summary"] = out / "judge_summary.json"
    atomic_write_text(paths["summary"], json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    if update_report and insert_into_report(out / "report.html", html_section(summary, plots)):
        paths["report"] = out / "report.html"
    return paths
