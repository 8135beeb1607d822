"""The formula library as a networkx dependency graph, for the questions only a graph answers.

What does step time depend on? What changes if tp changes? The library is a bipartite
graph: quantity nodes and formula nodes, an edge ``quantity -> formula`` where a quantity
appears on a formula's right side ("appears in"), and ``formula -> quantity`` to the quantity a
formula gives ("determines", its left side). An equation with no left side (an implicit law)
gets "appears in" edges only. Each formula node carries its ``when`` (the option values it holds
under); the graph of a question holds only the formulas in force under its options.

The solver does not walk this graph (its routing keeps its own faster index,
:mod:`symcalc.engine.routing`); users do. networkx is imported here only, on the paths that
build a graph, so that a cached ``solve`` never pays for it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # pragma: no cover
    import networkx as nx


def q(name: str) -> str:
    """The node of a quantity."""
    return f"q:{name}"


def f(fid: str) -> str:
    """The node of a formula."""
    return f"f:{fid}"


def dependency_graph(library, options: Mapping[str, str]) -> nx.DiGraph:
    """The library's formulas in force under ``options`` (every option's effective value) as a
    directed graph: quantity and formula nodes, "appears in" and "determines" edges.

    Node attributes: ``kind`` ("quantity" or "formula"), ``name`` (a quantity's name, a formula's
    id), ``unit`` and ``description`` (quantities), ``title``, ``equation``, ``when`` (formulas).
    Edge attribute ``relation``: "appears in" or "determines". Built once per library and
    options (memoised; the graph is shared: copy it before changing it). O(formulas x their
    quantities).
    """
    return _build(library, tuple(sorted(options.items())))


@functools.lru_cache(maxsize=16)
def _build(library, options: tuple[tuple[str, str], ...]) -> nx.DiGraph:
    import networkx as nx  # on use: only the graph's users pay for it

    g = nx.DiGraph()
    for spec in library.active_formulas(dict(options)):
        g.add_node(f(spec.id), kind="formula", name=spec.id, title=spec.title, equation=spec.equation,
                   when={k: list(v) for k, v in library.said_values(spec.when).items()}, default_rule=spec.default_rule)
        for name in spec.quantities:
            if name not in g:
                _add_quantity(g, library, name)
            if name == spec.lhs_name:
                g.add_edge(f(spec.id), q(name), relation="determines")
            else:
                g.add_edge(q(name), f(spec.id), relation="appears in")
    return g


def _add_quantity(g, library, name: str) -> None:
    spec = library.quantities[name]
    g.add_node(q(name), kind="quantity", name=name, unit=str(spec.unit), description=spec.description,
               input=bool(spec.input))


def neighbourhood(g: nx.DiGraph, name: str, depth: int | None = None) -> dict[str, Any]:
    """What ``name`` depends on (``upstream``: quantities with a path to it) and what depends on
    it (``downstream``), each quantity with its distance in formula hops, nearest first; and the
    direct ones (``depends_on``: the right sides of the formulas that give it; ``used_by``: the
    left sides of the formulas it appears in). A quantity no formula gives as written has
    ``solved_from``: formula id -> the other quantities of each formula it appears in (what
    solving that formula for it takes). ``depth`` bounds the hops (None: all).
    O(nodes + edges) within the depth."""
    import networkx as nx  # on use

    node = q(name)
    if node not in g:
        return {"name": name, "depends_on": [], "used_by": [], "upstream": {}, "downstream": {}, "solved_from": {}}
    cutoff = None if depth is None else 2 * depth
    up = nx.single_source_shortest_path_length(g.reverse(copy=False), node, cutoff=cutoff)
    down = nx.single_source_shortest_path_length(g, node, cutoff=cutoff)

    def quantities(dist: dict) -> dict[str, int]:
        found = {g.nodes[n]["name"]: d // 2 for n, d in dist.items() if n != node and g.nodes[n]["kind"] == "quantity"}
        return dict(sorted(found.items(), key=lambda kv: (kv[1], kv[0])))

    upstream, downstream = quantities(up), quantities(down)
    # a quantity no formula gives as written (mfu: achieved_flops_cluster = mfu x peak x n) is
    # still derived from the others of a formula solved for it: those, formula by formula
    inverse = {g.nodes[fn]["name"]: sorted(g.nodes[x]["name"] for x in g.predecessors(fn) if x != node)
               + sorted(g.nodes[x]["name"] for x in g.successors(fn))
               for fn in g.successors(node) if g.nodes[fn]["kind"] == "formula"} if not upstream else {}
    return {"name": name,
            "depends_on": [k for k, d in upstream.items() if d == 1],
            "used_by": [k for k, d in downstream.items() if d == 1],
            "upstream": upstream, "downstream": downstream, "solved_from": inverse}


def subgraph_of(g: nx.DiGraph, name: str, depth: int | None = None) -> nx.DiGraph:
    """The part of ``g`` that gives ``name``: it and every node with a path to it (within
    ``depth`` formula hops). O(nodes + edges)."""
    import networkx as nx  # on use

    node = q(name)
    if node not in g:
        return g.subgraph([]).copy()
    cutoff = None if depth is None else 2 * depth
    keep = nx.single_source_shortest_path_length(g.reverse(copy=False), node, cutoff=cutoff)
    return g.subgraph(keep).copy()


def as_json(g: nx.DiGraph) -> dict[str, list]:
    """``nodes`` (id and attributes) and ``edges`` (source, target, relation) lists."""
    return {"nodes": [{"id": n, **attrs} for n, attrs in g.nodes(data=True)],
            "edges": [{"source": a, "target": b, **attrs} for a, b, attrs in g.edges(data=True)]}


def as_dot(g: nx.DiGraph) -> str:
    """Graphviz DOT text (no pydot needed): quantities as ellipses, formulas as boxes."""
    def esc(s: str) -> str:
        return s.replace("\\", "\\\\").replace('"', '\\"')
    lines = ["digraph symcalc {", "  rankdir=LR;", "  node [fontname=Helvetica, fontsize=10];"]
    for n, a in g.nodes(data=True):
        shape = "ellipse" if a["kind"] == "quantity" else "box"
        label = a["name"] if a["kind"] == "quantity" else a.get("title") or a["name"]
        lines.append(f'  "{esc(n)}" [label="{esc(label)}", shape={shape}];')
    for a, b in g.edges():
        lines.append(f'  "{esc(a)}" -> "{esc(b)}";')
    lines.append("}")
    return "\n".join(lines) + "\n"
