"""Rendering of a session: transcript lines (``ansi``) and the stance graph (``rgb_array``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rescue_env.data.schema import Row

if TYPE_CHECKING:
    from rescue_env.dynamics.base import TherapistMove
    from rescue_env.session import Session


def format_row(row: Row) -> str:
    """``Speaker → Target [label]: text`` for one benchmark row."""
    label = row.strategy if row.is_therapist else row.utterance_type
    target = ", ".join(row.target) or "-"
    return f"{row.primary_speaker} → {target} [{label or '-'}]: {row.dialogue_cleaned}"


def render_ansi(session: Session, last: tuple[TherapistMove, list[Row]] | None) -> str:
    """The rows of the last step (``(move, rows)``; the last seed rows before the first
    step) and the state."""
    rows = last[1] if last is not None else session.rows[-4:]
    lines = [f"t={session.t} " + session.state.summary()]
    if last is not None and not last[0].intervene:
        lines.append("Therapist keeps listening")
    lines.extend(format_row(r) for r in rows)
    return "\n".join(lines) + "\n"


def draw_stance_graph(ax, members, distress, stance, title: str) -> None:
    """Draw G_t on a matplotlib axis: nodes coloured by distress (white → red), directed
    edges coloured by stance (red hostile → green warm)."""
    import networkx as nx
    from matplotlib import cm

    graph = nx.DiGraph()
    n = len(members)
    for i in range(n):
        graph.add_node(i)
    for i in range(n):
        for j in range(n):
            if i != j:
                graph.add_edge(i, j, weight=float(stance[i][j]))
    pos = nx.circular_layout(graph)
    node_colors = [cm.Reds(0.15 + 0.85 * float(d)) for d in distress]
    edge_colors = [cm.RdYlGn(0.5 + 0.5 * graph.edges[e]["weight"]) for e in graph.edges]
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_color=node_colors, node_size=1400, edgecolors="black")
    nx.draw_networkx_labels(graph, pos, ax=ax, labels={i: f"{members[i]}\n{float(distress[i]):.2f}" for i in range(n)}, font_size=8)
    nx.draw_networkx_edges(
        graph, pos, ax=ax, edge_color=edge_colors, width=2.5, arrows=True, arrowsize=14,
        connectionstyle="arc3,rad=0.15", node_size=1400,
    )
    ax.set_title(title, fontsize=10)
    ax.set_axis_off()


def render_rgb(session: Session) -> np.ndarray:
    """The stance graph as an ``(H, W, 3) uint8`` image."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    st = session.state
    fig = Figure(figsize=(4, 4), dpi=80)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_subplot(111)
    draw_stance_graph(ax, st.members, st.distress, st.stance, f"t={session.t}  {st.pattern or 'no clear pattern'}")
    canvas.draw()
    image = np.asarray(canvas.buffer_rgba())[..., :3].copy()
    return image
