"""Plots and the self-contained HTML report of a rollout run folder.

Plots (PNG under ``plots/``): per agent, the example episode — the *same* seed dialogue,
episode index and reset seed for every agent (the reference agent's median-return episode),
so the agents' pictures compare like with like — with each member's distress over time (the
worst-off drawn as a dashed black line, the members the therapist addressed marked on their
lines) and the pattern timeline beneath; stance-graph snapshots with colour bars; an
across-agent comparison of σ* return, the paired difference to the reference agent and the
worst-off member's distress, per scenario. Each pattern label has one fixed colour
(:data:`PATTERN_COLORS`), distinct from the members' line colours.

``report.html`` embeds them (base64) with run metadata, a table of contents, the summary
table and its glossary, and one annotated transcript per agent, so the single file can be
mailed or opened offline. :func:`rebuild_report` re-renders it from a run folder.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import re
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.cm import ScalarMappable  # noqa: E402
from matplotlib.colors import ListedColormap, Normalize  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from rescue_env.atomic import atomic_write_text, save_figure  # noqa: E402
from rescue_env.comparison import POOLED, episode_key, scoped_summaries  # noqa: E402
from rescue_env.envs.render import draw_stance_graph  # noqa: E402
from rescue_env.rollout import EpisodeRecord  # noqa: E402

#: One fixed colour per relation-pattern label of both taxonomies (pastels: they fill the
#: pattern timeline, while the members' distress lines use the saturated MEMBER_COLORS).
PATTERN_COLORS: dict[str, str] = {
    "pursue_withdraw": "#fdb462",
    "attack_attack": "#fb8072",
    "escalation_conflict": "#f4a6c6",
    "withdraw_withdraw": "#bebada",
    "mutual_disengagement": "#d8b48a",
    "cross_generational_coalition": "#ffed6f",
    "boundary_hierarchy_strain": "#d9a8d9",
    "mixed_transition": "#80b1d3",
    "repair_softening": "#b3de69",
    "constructive_alignment": "#8dd3c7",
    "cooperative_family_alliance": "#ccebc5",
    "none": "#e6e6e6",
}
#: Members' line colours, by seat: dark tones, so no member reads as the pastel of a pattern.
MEMBER_COLORS = ["#1f3b73", "#b35806", "#1b7837", "#762a83", "#b2182b", "#01665e", "#5e3c99", "#8c510a", "#2166ac", "#4d4d4d"]
WORST_OFF_STYLE = {"color": "black", "lw": 2.2, "ls": "--"}


def pattern_color(label: str | None) -> str:
    """The fixed colour of a pattern label (unknown labels: dark grey)."""
    return PATTERN_COLORS.get(label or "none", "#999999")


def _median(records: Sequence[EpisodeRecord]) -> EpisodeRecord | None:
    ok = sorted((r for r in records if not r.failed and r.trace), key=lambda r: r.sigma_return)
    return ok[len(ok) // 2] if ok else None


def example_episodes(records_by_agent: dict[str, list[EpisodeRecord]], reference: str | None = None) -> dict[str, EpisodeRecord]:
    """Per agent, the same example episode: the reference agent's (else the first agent's)
    median-return episode, played by every agent; an agent that did not finish that episode
    (another scenario, a failure) shows its own median episode."""
    order = ([reference] if reference in records_by_agent else []) + list(records_by_agent)
    key = None
    for name in order:
        ex = _median(records_by_agent[name])
        if ex is not None:
            key = episode_key(ex)
            break
    out = {}
    for name, records in records_by_agent.items():
        same = [r for r in records if not r.failed and r.trace and episode_key(r) == key]
        chosen = same[0] if same else _median(records)
        if chosen is not None:
            out[name] = chosen
    return out


def _members(record: EpisodeRecord) -> list[str]:
    if record.dialogue is not None:
        return list(record.dialogue.participants)
    return [f"m{i}" for i in range(len(record.trace[0]["distress"]))]


def plot_episode(record: EpisodeRecord, path: Path) -> Path:
    """Distress of each member per step (worst-off dashed black), the members the therapist
    addressed marked on their lines, and the pattern timeline beneath."""
    members = _members(record)
    distress = np.array([p["distress"] for p in record.trace])
    steps = np.arange(len(distress))
    fig, (ax, axp) = plt.subplots(2, 1, figsize=(9.5, 4.4), sharex=True, gridspec_kw={"height_ratios": [4, 1]})
    for i, name in enumerate(members):
        ax.plot(steps, distress[:, i], lw=1.5, color=MEMBER_COLORS[i % 10], label=name)
    ax.plot(steps, distress.max(axis=1), label="worst-off (max)", **WORST_OFF_STYLE)
    addressed = False
    for t, p in enumerate(record.trace):
        if not p.get("intervened"):
            continue
        ax.axvline(t, color="grey", lw=0.6, alpha=0.4)
        for name in p.get("target") or []:
            if name in members:
                i = members.index(name)
                ax.plot(t, distress[t, i], marker="v", ms=7, color=MEMBER_COLORS[i % 10], mec="black", mew=0.6, ls="none")
                addressed = True
    handles, labels = ax.get_legend_handles_labels()
    if addressed:
        handles.append(Line2D([], [], marker="v", ms=7, color="white", mec="black", ls="none"))
        labels.append("addressed by the therapist")
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("distress")
    ax.legend(handles, labels, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title(
        f"{record.agent}: {record.seed_sample_id} episode {record.episode} (seed {record.seed})  σ* return {record.sigma_return:.2f}",
        fontsize=9,
    )
    labels_t = [p["pattern"] or "none" for p in record.trace]
    for t, lab in enumerate(labels_t):
        axp.axvspan(t - 0.5, t + 0.5, color=pattern_color(lab))
    uniq = list(dict.fromkeys(labels_t))
    patches = [plt.Rectangle((0, 0), 1, 1, color=pattern_color(lab)) for lab in uniq]
    axp.legend(patches, uniq, fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5), title="pattern", title_fontsize=6)
    axp.set_yticks([])
    axp.set_xlim(-0.5, len(steps) - 0.5)
    axp.set_xlabel("step (grey lines: the therapist speaks)")
    fig.tight_layout()
    save_figure(fig, path, dpi=90)
    plt.close(fig)
    return path


def plot_snapshots(record: EpisodeRecord, path: Path, count: int = 3) -> Path:
    """Stance-graph snapshots at evenly spaced steps of an episode, with colour bars for
    distress (nodes) and stance (edges); laid out so 2-6 members fit without clipping."""
    members = _members(record)
    idx = sorted(set(np.linspace(0, len(record.trace) - 1, max(1, count)).round().astype(int).tolist()))
    side = 3.0 if len(members) <= 3 else 3.6
    # snapshots, the distress colour bar, a spacer (room for its label), the stance colour bar
    fig, axes = plt.subplots(
        1, len(idx) + 3, figsize=(side * len(idx) + 2.4, side + 0.4), squeeze=False,
        gridspec_kw={"width_ratios": [1.0] * len(idx) + [0.06, 0.2, 0.06], "wspace": 0.3},
    )
    axes[0][-2].set_axis_off()
    for ax, t in zip(axes[0], idx):
        p = record.trace[t]
        draw_stance_graph(ax, members, p["distress"], p["stance"], f"t={t}  {p['pattern'] or 'no clear pattern'}")
        ax.set_xlim(-1.6, 1.6)  # room for the nodes on the layout's unit circle
        ax.set_ylim(-1.6, 1.6)
        ax.set_aspect("equal")
        ax.title.set_fontsize(8)
    # the colour maps of draw_stance_graph: nodes Reds(0.15 + 0.85 d), edges RdYlGn(0.5 + 0.5 g)
    reds = ListedColormap(plt.get_cmap("Reds")(np.linspace(0.15, 1.0, 256)))
    fig.colorbar(ScalarMappable(Normalize(0, 1), reds), cax=axes[0][-3], label="distress d (nodes)")
    fig.colorbar(ScalarMappable(Normalize(-1, 1), "RdYlGn"), cax=axes[0][-1], label="stance g (edges)")
    save_figure(fig, path, dpi=80, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_comparison(comparison: dict[str, Any], path: Path) -> Path:
    """Per agent and scope (pooled and each scenario): σ* return (mean ± 95 % CI), the
    paired difference to the reference agent (± 95 % CI) and the worst-off distress."""
    rows = [(a, s, f) for a, s, f in scoped_summaries(comparison) if "sigma_return_mean" in f]
    scopes = [POOLED] + [s for s in comparison["scenarios"] if len(comparison["scenarios"]) > 1]
    agents = list(dict.fromkeys(a for a, _, _ in rows))
    x = np.arange(len(agents))
    w = 0.8 / len(scopes)
    scope_colors = dict(zip(scopes, ["#4c72b0", "#8c8c8c", "#c7c7c7"]))
    ref = comparison.get("compare_to")
    ncols = 3 if ref else 2
    fig, axes = plt.subplots(1, ncols, figsize=(4.6 * ncols, 3.8))
    a1, a2 = axes[0], axes[-1]
    for k, scope in enumerate(scopes):
        figs = {a: f for a, s, f in rows if s == scope}
        xs = x + (k - (len(scopes) - 1) / 2) * w
        label = "pooled" if scope == POOLED else scope
        a1.bar(xs, [figs[a]["sigma_return_mean"] if a in figs else np.nan for a in agents], w,
               yerr=[figs[a]["sigma_return_ci95"] if a in figs else 0 for a in agents], capsize=3, color=scope_colors[scope], label=label)
        a2.bar(xs, [figs[a]["final_max_distress"] if a in figs else np.nan for a in agents], w, color=scope_colors[scope], label=label)
        if ref:
            means, errs = [], []
            for a in agents:
                p = figs.get(a, {}).get("paired") or {}
                means.append(p.get("mean", np.nan) if a != ref else 0.0)
                errs.append(0.0 if a == ref or p.get("n", 0) < 2 else p["ci95"])
            axes[1].bar(xs, means, w, yerr=errs, capsize=3, color=scope_colors[scope], label=label)
    a1.set_title("σ* return (mean ± 95 % CI)", fontsize=10)
    a2.set_title("worst-off member's final distress", fontsize=10)
    a2.set_ylim(0, 1)
    if ref:
        axes[1].axhline(0, color="black", lw=0.8)
        axes[1].set_title(f"paired Δ σ* return vs {ref} (± 95 % CI)", fontsize=10)
    for ax in axes:
        ax.set_xticks(x, agents, rotation=20)
    a1.legend(fontsize=7)
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
body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
div.wide{overflow-x:auto}
table.summary{width:100%;font-size:12px}
table.summary td,table.summary th{padding:3px 4px}
table.summary td{white-space:nowrap}
table.summary td:last-child{white-space:normal;min-width:8em;overflow-wrap:anywhere}
table{border-collapse:collapse;margin:1em 0;font-size:13px}
td,th{border:1px solid #ccc;padding:4px 6px;vertical-align:top;text-align:left}
th{background:#f0f0f0}
tr.th td{background:#eef5ff}
tr.scope td{color:#555;font-size:12px}
img{max-width:100%;margin:.5em 0}
small{color:#555}
nav.toc{background:#f7f7f7;border:1px solid #ddd;padding:.5em 1em;display:inline-block}
nav.toc li{margin:.15em 0}
dl.glossary{display:grid;grid-template-columns:max-content auto;gap:.2em 1em;font-size:13px}
dl.glossary dt{font-weight:bold}
dl.glossary dd{margin:0}
table.meta td{border:none;padding:1px 8px 1px 0}
body:not(:has(#judge)) li.judge-link{display:none}
"""


def run_metadata(config_text: str = "") -> dict[str, str]:
    """Date, package version and git commit of this code (when it runs from a checkout)."""
    try:
        version = metadata.version("rescue-env")
    except metadata.PackageNotFoundError:
        version = "unknown"
    try:
        here = Path(__file__).resolve().parent
        git = subprocess.run(
            ["git", "-C", str(here), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        git = "not a git checkout"
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "rescue-env version": version,
        "git commit": git,
    }


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def write_report(
    out_dir: Path,
    comparison: dict[str, Any],
    records_by_agent: dict[str, list[EpisodeRecord]],
    *,
    config_text: str = "",
    extra_sections: Sequence[tuple[str, str]] = (),
    snapshots: int = 3,
    metadata_rows: dict[str, str] | None = None,
) -> Path:
    """Write ``plots/`` and ``report.html`` into ``out_dir``; returns the report path.

    ``comparison`` is :func:`rescue_env.comparison.compare` of ``records_by_agent``;
    ``metadata_rows`` the run metadata shown at the top (default :func:`run_metadata`)."""
    plots = out_dir / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    comparison_png = plot_comparison(comparison, plots / "comparison.png")
    meta = metadata_rows if metadata_rows is not None else run_metadata()
    ref = comparison.get("compare_to")
    examples = example_episodes(records_by_agent, ref)
    toc = [("summary", "Summary"), ("glossary", "Glossary")]
    body: list[str] = []
    pooled, left = comparison["pooled_scenarios"], comparison["left_out"]
    note = f"Pooled rows (scenario '{POOLED}'): {', '.join(pooled) or 'none'}, the scenarios every agent played."
    if left:
        note += " Left out of the pooled rows: " + "; ".join(f"{s} (not played by {', '.join(a)})" for s, a in left.items()) + "."
    if ref:
        note += f" Δ: paired difference of σ* return to <b>{html.escape(ref)}</b> on the same episodes."
    body += [
        '<section id="summary"><h2>Summary</h2>', f"<p>{note}</p>", summary_table_html(comparison), _img(comparison_png), "</section>",
        '<section id="glossary"><h2>Glossary</h2>', glossary_html(comparison), "</section>",
        "<!-- judge -->",
    ]
    for agent, records in records_by_agent.items():
        anchor = f"agent-{_slug(agent)}"
        toc.append((anchor, f"Agent: {agent}"))
        if agent not in examples:
            body.append(f'<section id="{anchor}"><h2>Agent: {html.escape(agent)}</h2><p>every episode failed</p></section>')
            continue
        ex = examples[agent]
        ep_png = plot_episode(ex, plots / f"episode_{agent}.png")
        snap_png = plot_snapshots(ex, plots / f"stance_{agent}.png", snapshots)
        body += [
            f'<section id="{anchor}"><h2>Agent: {html.escape(agent)}</h2>',
            f"<p>Example episode (the same seed dialogue, episode and seed for every agent that played it): "
            f"<code>{html.escape(ex.key)}</code>, seed {ex.seed}</p>",
            _img(ep_png),
            "<h3>Stance graph snapshots</h3><p>Nodes: a member's distress (white → red); edges: the stance of the source "
            "toward the target (red hostile → green warm).</p>",
            _img(snap_png),
            "<h3>Annotated transcript</h3>",
            _transcript_html(ex),
            "</section>",
        ]
    for title, section in extra_sections:
        anchor = _slug(title)
        toc.append((anchor, title))
        body += [f'<section id="{anchor}"><h2>{html.escape(title)}</h2>', section, "</section>"]
    if config_text:
        toc.append(("configuration", "Configuration"))
        body += ['<section id="configuration"><h2>Configuration</h2>', f"<pre>{html.escape(config_text)}</pre></section>"]
    items = [f'<li><a href="#{a}">{html.escape(t)}</a></li>' for a, t in toc]
    items.insert(2, '<li class="judge-link"><a href="#judge">Support quality (judge)</a></li>')
    meta_rows = "".join(f"<tr><td><b>{html.escape(k)}</b></td><td>{html.escape(v)}</td></tr>" for k, v in meta.items())
    head = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>rescue-env rollout report</title><style>{CSS}</style></head><body>",
        "<h1>rescue-env rollout report</h1>",
        f'<table class="meta">{meta_rows}</table>',
        f'<nav class="toc"><b>Contents</b><ol>{"".join(items)}</ol></nav>',
    ]
    path = out_dir / "report.html"
    atomic_write_text(path, "\n".join(head + body + ["</body></html>"]))
    return path


@dataclass(frozen=True)
class Column:
    """One figure of the summary tables: where it is in an agent's figures, its header, its
    format and what it means (the glossary)."""

    key: str
    label: str
    fmt: str
    meaning: str


#: Every column of the summary tables, in order (``summary.csv`` and the report show all of
#: them; the console a 100-column selection, :func:`console_rows`). ``{ref}`` in a label is
#: the reference agent.
SUMMARY_COLUMNS = [
    Column("episodes", "episodes", "{:d}", "episodes played (finished and failed)"),
    Column("failed", "failed", "{:d}", "episodes that failed (LLM calls that failed for good); not averaged"),
    Column("sigma_return_mean", "σ* return", "{:.2f}", "mean discounted σ* return per episode (higher is better)"),
    Column("sigma_return_ci95", "± 95 %", "{:.2f}", "half-width of the 95 % Student-t interval of the mean σ* return"),
    Column("paired.mean", "Δ vs {ref}", "{:+.2f}", "mean paired difference of σ* return to the reference agent (compare_to) on the same episodes"),
    Column("paired.ci", "Δ 95 % CI", "", "95 % Student-t interval of the paired differences; excluding 0 means the agents differ"),
    Column("sigma_mean_distress", "−w·mean d", "{:.2f}", "σ* component: −w_mean × the members' mean distress, summed over the episode"),
    Column("sigma_stance", "β·stance", "{:.2f}", "σ* component: β × the mean stance between members (warmth), summed over the episode"),
    Column("sigma_max_distress", "−λ·max d", "{:.2f}", "σ* component: −λ × the worst-off member's distress, summed (the bucket-effect cost)"),
    Column("sigma_intervention_cost", "−c·z", "{:.2f}", "σ* component: −c × the turns the therapist spoke, summed (the price of talking)"),
    Column("final_max_distress", "final worst d", "{:.2f}", "the worst-off member's distress at the episode's end (0-1, lower is better)"),
    Column("peak_max_distress", "peak worst d", "{:.2f}", "the highest distress any member reached in the episode (0-1)"),
    Column("untended_turns_mean", "untended/member", "{:.1f}", "turns a member went without being addressed, averaged over members"),
    Column("untended_turns_max_member", "untended (most)", "{:.1f}", "turns the most-neglected member went without being addressed (someone left behind)"),
    Column("intervention_rate", "speak rate", "{:.2f}", "share of turns in which the therapist spoke (z = 1)"),
    Column("pattern_shares", "top patterns", "", "the three most frequent relation patterns over the episodes' steps, with their shares"),
]

#: Headers of the scope columns that precede the figures.
SCOPE_GLOSSARY = [
    ("agent", "the therapist agent (never, random, heuristic, imitation, policy, llm…)"),
    ("scenario", f"'{POOLED}': the scenarios every agent played, pooled; otherwise one scenario"),
]


def _cell(fig: dict[str, Any], col: Column) -> str:
    if col.key == "paired.ci":
        p = fig.get("paired")
        if not p or p.get("n", 0) < 2 or p["ci_low"] != p["ci_low"]:
            return "-"
        return f"[{p['ci_low']:+.2f}, {p['ci_high']:+.2f}]"
    if col.key == "pattern_shares":
        return ", ".join(f"{k} {v:.0%}" for k, v in list(fig.get("pattern_shares", {}).items())[:3])
    if col.key.startswith("paired."):
        v = (fig.get("paired") or {}).get(col.key.split(".", 1)[1])
    else:
        v = fig.get(col.key)
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    return col.fmt.format(v)


def _columns(comparison: dict[str, Any]) -> list[Column]:
    cols = list(SUMMARY_COLUMNS)
    if comparison.get("compare_to") is None:  # no reference agent in the run: no Δ columns
        cols = [c for c in cols if not c.key.startswith("paired.")]
    return cols


def _console_cells(fig: dict[str, Any], show_failed: bool, show_delta: bool) -> list[str]:
    def f(key: str, fmt: str = "{:.2f}") -> str:
        v = fig.get(key)
        return "-" if v is None or v != v else fmt.format(v)

    ret = "-" if "sigma_return_mean" not in fig else f"{fig['sigma_return_mean']:.2f} ± {fig['sigma_return_ci95']:.2f}"
    cells = [f("episodes", "{:d}")] + ([f("failed", "{:d}")] if show_failed else []) + [ret]
    if show_delta:
        p = fig.get("paired")
        if p is None:
            cells.append("reference")
        elif p.get("n", 0) == 0:
            cells.append("-")
        elif p.get("n", 0) < 2 or p["ci_low"] != p["ci_low"]:
            cells.append(f"{p['mean']:+.2f}")
        else:
            cells.append(f"{p['mean']:+.2f} [{p['ci_low']:+.2f}, {p['ci_high']:+.2f}]")
    return cells + [f("final_max_distress"), f("peak_max_distress"), f("untended_turns_max_member", "{:.1f}"), f("intervention_rate")]


def console_rows(comparison: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The console summary (fits 100 columns): per agent the pooled row, then one ``↳
    scenario`` row per scenario when there are several. Headers are two lines; σ* return
    and its interval share a cell, so do Δ and its interval; ``failed`` only when an episode
    failed."""
    ref = comparison.get("compare_to")
    scoped = scoped_summaries(comparison)
    show_failed = any(fig.get("failed") for _, _, fig in scoped)
    headers = ["agent", "episodes"] + (["failed"] if show_failed else []) + ["σ* return\n± 95 %"]
    if ref:
        headers.append(f"Δ vs {ref}\n[95 % CI]")
    headers += ["final\nworst d", "peak\nworst d", "untended\n(most)", "speak\nrate"]
    rows = []
    for agent, scope, fig in scoped:
        if scope != POOLED and len(comparison["scenarios"]) < 2:
            continue  # one scenario: its row repeats the pooled one
        rows.append([agent if scope == POOLED else f"↳ {scope}"] + _console_cells(fig, show_failed, bool(ref)))
    return headers, rows


def summary_rows(comparison: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and formatted rows of the full summary (from
    :func:`rescue_env.comparison.compare`): every column, one row per agent and scope
    (pooled, then each scenario); the report's table."""
    ref = comparison.get("compare_to") or "-"
    cols = _columns(comparison)
    headers = ["agent", "scenario"] + [c.label.format(ref=ref) for c in cols]
    rows = [[agent, scope] + [_cell(fig, c) for c in cols] for agent, scope, fig in scoped_summaries(comparison)]
    return headers, rows


def csv_rows(comparison: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """``summary.csv``: every column, one row per agent and scope, numbers at 4 decimals."""
    ref = comparison.get("compare_to") or "-"
    cols = _columns(comparison)
    headers = ["agent", "scenario"]
    for c in cols:
        headers += ["Δ 95 % CI low", "Δ 95 % CI high"] if c.key == "paired.ci" else [c.label.format(ref=ref)]
    rows: list[list[Any]] = []
    for agent, scope, fig in scoped_summaries(comparison):
        row: list[Any] = [agent, scope]
        for c in cols:
            if c.key == "paired.ci":
                p = fig.get("paired") or {}
                row += [_num(p.get("ci_low")), _num(p.get("ci_high"))]
            elif c.key == "pattern_shares":
                row.append(_cell(fig, c))
            elif c.key.startswith("paired."):
                row.append(_num((fig.get("paired") or {}).get(c.key.split(".", 1)[1])))
            else:
                row.append(_num(fig.get(c.key)))
        rows.append(row)
    return headers, rows


def _num(v: Any) -> Any:
    if v is None or (isinstance(v, float) and v != v):
        return ""
    return round(v, 4) if isinstance(v, float) else v


def glossary(comparison: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """(header, meaning) of every summary column (the report's and README's glossary)."""
    ref = (comparison or {}).get("compare_to") or "REF"
    return SCOPE_GLOSSARY + [(c.label.format(ref=ref), c.meaning) for c in SUMMARY_COLUMNS]


def summary_table_html(comparison: dict[str, Any]) -> str:
    headers, rows = summary_rows(comparison)
    out = ['<div class="wide"><table class="summary"><tr>' + "".join(f"<th>{html.escape(h)}</th>" for h in headers) + "</tr>"]
    for row in rows:
        cls = "" if row[1] == POOLED else ' class="scope"'
        out.append(f"<tr{cls}>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>")
    out.append("</table></div>")
    return "\n".join(out)


def glossary_html(comparison: dict[str, Any]) -> str:
    items = "".join(f"<dt>{html.escape(h)}</dt><dd>{html.escape(m)}</dd>" for h, m in glossary(comparison))
    return f'<dl class="glossary">{items}</dl>'
