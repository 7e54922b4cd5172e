"""Plots and the self-contained HTML report of a rollout run folder.

Plots (PNG under ``plots/``): per agent, one example episode's distress of each member over
time with the worst-off highlighted and the pattern timeline beneath; stance-graph
snapshots; an across-agent comparison of σ* return and worst-off distress. ``report.html``
embeds them (base64) with the summary table and one annotated transcript per agent, so the
single file can be mailed or opened offline.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from rescue_env.atomic import atomic_write_text, save_figure  # noqa: E402
from rescue_env.envs.render import draw_stance_graph  # noqa: E402
from rescue_env.rollout import EpisodeRecord  # noqa: E402

PATTERN_COLORS = plt.get_cmap("tab10")


def example_episode(records: Sequence[EpisodeRecord]) -> EpisodeRecord:
    """The episode whose σ* return is the median of the agent's (a typical one)."""
    ok = [r for r in records if not r.failed and r.trace]
    ok.sort(key=lambda r: r.sigma_return)
    return ok[len(ok) // 2]


def plot_episode(record: EpisodeRecord, path: Path) -> Path:
    """Distress of each member per step (worst-off drawn thick), and the pattern timeline."""
    members = record.dialogue.participants if record.dialogue is not None else [f"m{i}" for i in range(len(record.trace[0]["distress"]))]
    distress = np.array([p["distress"] for p in record.trace])
    steps = np.arange(len(distress))
    fig, (ax, axp) = plt.subplots(2, 1, figsize=(9, 4.2), sharex=True, gridspec_kw={"height_ratios": [4, 1]})
    for i, name in enumerate(members):
        ax.plot(steps, distress[:, i], lw=1.4, label=name)
    ax.plot(steps, distress.max(axis=1), color="black", lw=3, alpha=0.35, label="worst-off (max)")
    for t, p in enumerate(record.trace):
        if p.get("intervened"):
            ax.axvline(t, color="grey", lw=0.6, alpha=0.4)
    ax.set_ylim(0, 1)
    ax.set_ylabel("distress")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(f"{record.agent}: {record.seed_sample_id} ep{record.episode}  σ* return {record.sigma_return:.2f}", fontsize=9)
    labels = [p["pattern"] or "none" for p in record.trace]
    uniq = list(dict.fromkeys(labels))
    for t, lab in enumerate(labels):
        axp.axvspan(t - 0.5, t + 0.5, color=PATTERN_COLORS(uniq.index(lab) % 10))
    handles = [plt.Rectangle((0, 0), 1, 1, color=PATTERN_COLORS(i % 10)) for i in range(len(uniq))]
    axp.legend(handles, uniq, fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    axp.set_yticks([])
    axp.set_xlabel("step (grey lines: therapist speaks)")
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
    plt.close(fig)
    return path


def plot_snapshots(record: EpisodeRecord, path: Path, count: int = 3) -> Path:
    """Stance-graph snapshots at evenly spaced steps of an episode."""
    members = record.dialogue.participants if record.dialogue is not None else [f"m{i}" for i in range(len(record.trace[0]["distress"]))]
    idx = sorted(set(np.linspace(0, len(record.trace) - 1, max(1, count)).round().astype(int).tolist()))
    fig, axes = plt.subplots(1, len(idx), figsize=(3.2 * len(idx), 3.2), squeeze=False)
    for ax, t in zip(axes[0], idx):
        p = record.trace[t]
        draw_stance_graph(ax, members, p["distress"], p["stance"], f"t={t}  {p['pattern'] or 'no clear pattern'}")
    fig.tight_layout()
    save_figure(fig, path, dpi=80)
    plt.close(fig)
    return path


def plot_comparison(summary: dict[str, dict[str, Any]], path: Path) -> Path:
    """σ* return (mean ± 95 % CI) and final / peak worst-off distress per agent."""
    agents = [a for a in summary if "sigma_return_mean" in summary[a]]
    x = np.arange(len(agents))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
    means = [summary[a]["sigma_return_mean"] for a in agents]
    cis = [summary[a]["sigma_return_ci95"] for a in agents]
    a1.bar(x, means, yerr=cis, capsize=4, color="#4c72b0")
    a1.set_xticks(x, agents, rotation=20)
    a1.set_title("σ* return (mean ± 95 % CI)", fontsize=10)
    w = 0.38
    a2.bar(x - w / 2, [summary[a]["final_max_distress"] for a in agents], w, label="final", color="#dd8452")
    a2.bar(x + w / 2, [summary[a]["peak_max_distress"] for a in agents], w, label="peak", color="#c44e52")
    a2.set_xticks(x, agents, rotation=20)
    a2.set_ylim(0, 1)
    a2.set_title("worst-off member's distress", fontsize=10)
    a2.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
    plt.close(fig)
    return path


def _img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(path.name)}">'


def _transcript_html(record: EpisodeRecord, max_rows: int = 60) -> str:
    if record.dialogue is None:
        return "<p>(no transcript recorded)</p>"
    rows = record.dialogue.rows
    start = next((i for i, r in enumerate(rows) if r.extras.get("simulated")), len(rows))
    shown = rows[max(0, start - 3) : start + max_rows]
    out = ['<table class="tr"><tr><th>#</th><th>speaker → target</th><th>move</th><th>utterance</th><th>state after</th></tr>']
    for r in shown:
        sim = r.extras.get("simulated")
        move = f"<b>{html.escape(r.strategy or '')}</b>" if r.is_therapist else html.escape(r.utterance_type)
        emo = "; ".join(f"{e.person}: {e.emotion_description} ({e.intensity:g})" for e in r.internal_emotion)
        st = r.extras.get("state") or {}
        dist = ", ".join(f"{m}={d:.2f}" for m, d in zip(st.get("members", []), st.get("distress", [])))
        state = f"{html.escape(st.get('pattern') or 'no clear pattern')}<br>{html.escape(dist)}"
        cls = "th" if r.is_therapist else ""
        seed_note = "" if sim else " <i>(seed)</i>"
        out.append(
            f'<tr class="{cls}"><td>{r.row_index}</td><td>{html.escape(r.primary_speaker)} → {html.escape(", ".join(r.target))}{seed_note}</td>'
            f"<td>{move}</td><td>{html.escape(r.dialogue_cleaned)}<br><small>{html.escape(emo)}</small></td><td><small>{state}</small></td></tr>"
        )
    out.append("</table>")
    return "\n".join(out)


CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
td,th{border:1px solid #ccc;padding:4px 6px;vertical-align:top;text-align:left}
th{background:#f0f0f0}
tr.th td{background:#eef5ff}
img{max-width:100%;margin:.5em 0}
small{color:#555}
"""


def write_report(
    out_dir: Path,
    summary: dict[str, dict[str, Any]],
    records_by_agent: dict[str, list[EpisodeRecord]],
    *,
    config_text: str = "",
    extra_sections: Sequence[tuple[str, str]] = (),
    snapshots: int = 3,
) -> Path:
    """Write ``plots/`` and ``report.html`` into ``out_dir``; returns the report path."""
    plots = out_dir / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    comparison = plot_comparison(summary, plots / "comparison.png")
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>rescue-env rollout report</title><style>{CSS}</style></head><body>",
        "<h1>rescue-env rollout report</h1>",
        "<h2>Summary</h2>",
        summary_table_html(summary),
        _img(comparison),
    ]
    for agent, records in records_by_agent.items():
        if not any(not r.failed for r in records):
            parts.append(f"<h2>Agent: {html.escape(agent)}</h2><p>every episode failed</p>")
            continue
        ex = example_episode(records)
        ep_png = plot_episode(ex, plots / f"episode_{agent}.png")
        snap_png = plot_snapshots(ex, plots / f"stance_{agent}.png", snapshots)
        parts += [
            f"<h2>Agent: {html.escape(agent)}</h2>",
            f"<p>Example episode (median σ* return): <code>{html.escape(ex.key)}</code></p>",
            _img(ep_png),
            "<h3>Stance graph snapshots</h3><p>Nodes: distress (white → red); edges: stance of source toward target (red hostile → green warm).</p>",
            _img(snap_png),
            "<h3>Annotated transcript</h3>",
            _transcript_html(ex),
        ]
    for title, body in extra_sections:
        parts += [f"<h2>{html.escape(title)}</h2>", body]
    if config_text:
        parts += ["<h2>Configuration</h2>", f"<pre>{html.escape(config_text)}</pre>"]
    parts.append("<!-- judge -->\n</body></html>")
    path = out_dir / "report.html"
    atomic_write_text(path, "\n".join(parts))
    return path


SUMMARY_COLUMNS = [
    ("episodes", "episodes", "{:d}"),
    ("failed", "failed", "{:d}"),
    ("sigma_return_mean", "σ* return", "{:.3f}"),
    ("sigma_return_ci95", "± 95 %", "{:.3f}"),
    ("sigma_mean_distress", "−mean d", "{:.2f}"),
    ("sigma_stance", "β·stance", "{:.2f}"),
    ("sigma_max_distress", "−λ·max d", "{:.2f}"),
    ("sigma_intervention_cost", "−c·z", "{:.2f}"),
    ("final_max_distress", "final worst d", "{:.3f}"),
    ("peak_max_distress", "peak worst d", "{:.3f}"),
    ("untended_turns_mean", "untended/member", "{:.1f}"),
    ("untended_turns_max_member", "untended (most)", "{:.1f}"),
    ("intervention_rate", "intervene rate", "{:.2f}"),
]


def summary_rows(summary: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Header and formatted rows of the per-agent summary (shared by the console and HTML)."""
    headers = ["agent"] + [h for _, h, _ in SUMMARY_COLUMNS] + ["top patterns"]
    rows = []
    for agent, s in summary.items():
        row = [agent]
        for key, _, fmt in SUMMARY_COLUMNS:
            v = s.get(key)
            row.append("-" if v is None else fmt.format(v))
        shares = s.get("pattern_shares", {})
        row.append(", ".join(f"{k} {v:.0%}" for k, v in list(shares.items())[:3]))
        rows.append(row)
    return headers, rows


def summary_table_html(summary: dict[str, dict[str, Any]]) -> str:
    headers, rows = summary_rows(summary)
    out = ["<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in headers) + "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>")
    out.append("</table>")
    return "\n".join(out)
