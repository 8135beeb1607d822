"""Structural analysis of equation systems: matching, Dulmage-Mendelsohn, block triangular form.

Plain functions over a bipartite incidence structure (rows = equations, columns = unknowns).
They find which unknowns a set of equations determines and in which order, without looking at
the algebra: the classic front end of equation-oriented modelling tools (Modelica compilers,
pyomo's incidence analysis). References: Dulmage & Mendelsohn (1958); Hopcroft & Karp (1973);
Tarjan (1972); Pothen & Fan (1990).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Mapping

import networkx as nx
from networkx.algorithms import bipartite


def maximum_matching(rows: Mapping[Hashable, set], ) -> dict:
    """Maximum matching of rows to columns (Hopcroft-Karp), both directions in one dict.

    ``rows`` maps each row to the set of columns it may be matched to. O(E sqrt(V)).
    """
    g = nx.Graph()
    for r, cols in rows.items():
        g.add_node(("r", r))
        for c in cols:
            g.add_edge(("r", r), ("c", c))
    if g.number_of_edges() == 0:
        return {}
    top = {("r", r) for r in rows}
    return bipartite.hopcroft_karp_matching(g, top_nodes=top)


def dulmage_mendelsohn(rows: Mapping[Hashable, set], matching: dict | None = None) -> dict[str, set]:
    """Coarse Dulmage-Mendelsohn partition of a bipartite system.

    Returns sets of row ids and column ids: ``under_rows/under_cols`` (more unknowns than
    equations: reachable by alternating paths from unmatched columns), ``over_rows/over_cols``
    (more equations than unknowns: reachable from unmatched rows) and ``square_rows/
    square_cols`` (the rest, perfectly matched). Determined unknowns are square + over columns.
    Linear in the number of edges after the matching.
    """
    if matching is None:
        matching = maximum_matching(rows)
    cols_of = {r: set(cs) for r, cs in rows.items()}
    rows_of: dict[Hashable, set] = {}
    for r, cs in cols_of.items():
        for c in cs:
            rows_of.setdefault(c, set()).add(r)
    match_row = {r: matching[("r", r)][1] for r in rows if ("r", r) in matching}
    match_col = {c: r for r, c in match_row.items()}

    # under: from unmatched columns, column -> any row with it -> that row's matched column
    under_cols, under_rows = _alternating_reach((c for c in rows_of if c not in match_col), rows_of, match_row)
    # over: from unmatched rows, row -> any column in it -> that column's matched row
    over_rows, over_cols = _alternating_reach((r for r in rows if r not in match_row), cols_of, match_col)

    square_rows = set(match_row) - under_rows - over_rows
    square_cols = {match_row[r] for r in square_rows}
    return {"under_rows": under_rows, "under_cols": under_cols, "over_rows": over_rows,
            "over_cols": over_cols, "square_rows": square_rows, "square_cols": square_cols,
            "match": match_row}


def _alternating_reach(starts, neighbours: Mapping, matched: Mapping) -> tuple[set, set]:
    """Breadth-first search along alternating paths: from each start node to any neighbour,
    then from that neighbour along its matching edge. Returns (nodes of the starts' side,
    neighbours reached). O(E)."""
    side, other = set(starts), set()
    queue = deque(side)
    while queue:
        node = queue.popleft()
        for nb in neighbours.get(node, ()):
            if nb in other:
                continue
            other.add(nb)
            mate = matched.get(nb)
            if mate is not None and mate not in side:
                side.add(mate)
                queue.append(mate)
    return side, other


def block_triangular_order(rows: Mapping[Hashable, set], match: Mapping[Hashable, Hashable]) -> list[list]:
    """Blocks of a perfectly matched system in solving order (Tarjan SCCs, topologically sorted).

    ``rows`` maps row -> columns, ``match`` row -> its matched column (only matched rows
    take part). Returns a list of blocks, each a list of rows; a block of one row is an
    explicit assignment, a larger one an algebraic loop to solve simultaneously.
    O(V + E).
    """
    owner = {c: r for r, c in match.items()}
    g = nx.DiGraph()
    g.add_nodes_from(match)
    for r in match:
        for c in rows[r]:
            src = owner.get(c)
            if src is not None and src != r:
                g.add_edge(src, r)  # r uses the column that src computes
    cond = nx.condensation(g)
    members = cond.graph["mapping"]
    by_scc: dict[int, list] = {}
    for r, scc in members.items():
        by_scc.setdefault(scc, []).append(r)
    return [sorted(by_scc[i], key=str) for i in nx.topological_sort(cond)]
