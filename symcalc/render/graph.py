"""A quantity's place in the library's dependency graph, as text and as a picture.

Reads the records :mod:`symcalc.library.graph` builds (the neighbourhood dict, a networkx
subgraph); computes nothing of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from symcalc.render.common import plot_text
from symcalc.render.plot import plot_target, save_figure

if TYPE_CHECKING:
    from os import PathLike

    import networkx as nx

    from symcalc.library.registry import Library

SHOWN = 12          # names listed a line before "+N more"


def _names(names: list[str]) -> str:
    more = len(names) - SHOWN
    return ", ".join(names[:SHOWN]) + (f", +{more} more" if more > 0 else "") if names else "nothing"


def graph_text(lib: Library, info: dict[str, Any], options: Mapping[str, str]) -> str:
    """The direct dependencies both ways, then everything upstream and downstream by hops."""
    spec = lib.quantities[info["name"]]
    unit = f" [{spec.unit}]" if str(spec.unit) not in ("", "dimensionless") else ""
    under = ", ".join(f"{k}={v}" for k, v in options.items())
    out = [f"{info['name']}{unit}: {spec.description}",
           f"  under {under if under else 'the default options'} (--option to change; the formulas as written: a law "
           "is solved either way)",
           f"Depends on directly: {_names(info['depends_on'])}",
           f"Used directly by: {_names(info['used_by'])}"]
    if info.get("solved_from"):
        out.append(f"No formula gives {info['name']} as written; solved from a formula it appears in:")
        out += [f"  {fid}: {_names(names)}" for fid, names in list(info["solved_from"].items())[:SHOWN]]
    for side, label in (("upstream", "Upstream"), ("downstream", "Downstream")):
        by_hop: dict[int, list[str]] = {}
        for name, hops in info[side].items():
            by_hop.setdefault(hops, []).append(name)
        out.append(f"{label} ({len(info[side])} quantities):")
        out += [f"  {hops} hop{'s' if hops > 1 else ''}: {_names(names)}" for hops, names in sorted(by_hop.items())]
    return "\n".join(out)


def plot_graph(g: nx.DiGraph, name: str, path: str | PathLike[str]) -> None:
    """What gives ``name``, drawn left to right by formula hops from it (quantities as dots,
    formulas as small squares); the file's type from its suffix. A Figure of its own: the
    session's matplotlib backend is left as it was."""
    import networkx as nx
    from matplotlib.figure import Figure

    target = plot_target(path)

    node = f"q:{name}"
    dist = nx.single_source_shortest_path_length(g.reverse(copy=False), node) if node in g else {}
    for n in g.nodes:
        g.nodes[n]["layer"] = -dist.get(n, 0)
    pos = nx.multipartite_layout(g, subset_key="layer") if len(g) else {}
    fig = Figure(figsize=(12, max(4.0, 0.28 * max((list(dist.values()).count(d) for d in set(dist.values())),
                                                     default=1))), dpi=100)
    ax = fig.add_subplot()
    quantities = [n for n in g.nodes if g.nodes[n]["kind"] == "quantity"]
    formulas = [n for n in g.nodes if g.nodes[n]["kind"] == "formula"]
    nx.draw_networkx_edges(g, pos, ax=ax, alpha=0.3, arrows=True, arrowsize=6, node_size=30)
    nx.draw_networkx_nodes(g, pos, nodelist=quantities, ax=ax, node_size=30, node_color="#1f77b4")
    nx.draw_networkx_nodes(g, pos, nodelist=formulas, ax=ax, node_size=12, node_shape="s", node_color="#999999")
    nx.draw_networkx_labels(g, pos, labels={n: g.nodes[n]["name"] for n in quantities}, ax=ax, font_size=7)
    ax.set_title(plot_text(f"What gives {name}: quantities (blue) and formulas (grey), by formula hops"))
    ax.set_axis_off()
    fig.tight_layout()
    save_figure(fig, target, 100)
