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
from typing import Any


def maximum_matching(rows: Mapping[Any, set], ) -> dict:
    """Maximum matching of rows to columns, both directions in one dict (``("r", row)`` ->
    ``("c", col)`` and back).

    ``rows`` maps each row to the set of columns it may be matched to. Augmenting paths
    (Kuhn's algorithm) after a greedy start, iterative: O(V E) in the worst case, about a
    tenth of a millisecond for the library's stalled systems of ~200 equations with 2-3
    unknowns each, where building a networkx graph for Hopcroft-Karp cost 40 times that on
    every stall of every plan. Rows and columns are visited in a fixed order (rows as given,
    columns sorted), so the same system always gets the same matching.
    """
    adj = {r: sorted(cols, key=str) for r, cols in rows.items()}
    owner: dict = {}          # column -> row
    mate: dict = {}           # row -> column
    for r, cols in adj.items():               # greedy start: most rows match at once
        for c in cols:
            if c not in owner:
                owner[c], mate[r] = r, c
                break
    for r in adj:
        if r in mate or not adj[r]:
            continue
        # depth-first search for an augmenting path from r, with an explicit stack
        parent: dict = {}                     # column -> the row it was reached from
        seen: set = set()
        stack = [(r, iter(adj[r]))]
        end = None
        while stack and end is None:
            row, it = stack[-1]
            for c in it:
                if c in seen:
                    continue
                seen.add(c)
                parent[c] = row
                if c not in owner:
                    end = c
                    break
                stack.append((owner[c], iter(adj[owner[c]])))
                break
            else:
                stack.pop()
        while end is not None:                # flip the path
            row = parent[end]
            previous = mate.get(row)
            owner[end], mate[row] = row, end
            end = previous
    out = {}
    for r, c in mate.items():
        out[("r", r)] = ("c", c)
        out[("c", c)] = ("r", r)
    return out


def dulmage_mendelsohn(rows: Mapping[Any, set], matching: dict | None = None) -> dict[str, Any]:
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
    O(V + E), iterative.
    """
    owner = {c: r for r, c in match.items()}
    order = sorted(match, key=str)
    uses = {r: sorted({owner[c] for c in rows[r] if c in owner and owner[c] != r}, key=str) for r in order}
    # Tarjan's algorithm on "r uses the column that src computes" (edges src -> r)
    succ: dict = {r: [] for r in order}
    for r in order:
        for src in uses[r]:
            succ[src].append(r)
    return strongly_connected_components(succ, order)


def strongly_connected_components(succ: Mapping[Hashable, list], order: list | None = None) -> list[list]:
    """Tarjan's strongly connected components of the graph ``node -> succ[node]``, in
    topological order of the edges (a component before those it points to). ``order`` fixes
    the roots' order (a deterministic result); every node must be a key of ``succ``.
    O(V + E), iterative (no recursion limit)."""
    order = list(succ) if order is None else order
    index: dict = {}
    low: dict = {}
    on_stack: set = set()
    stack: list = []
    sccs: list[list] = []
    counter = 0
    for root in order:
        if root in index:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(succ[nxt])))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == node:
                        break
                sccs.append(sorted(comp, key=str))
    # Tarjan emits components in reverse topological order of the edges src -> r
    return sccs[::-1]
