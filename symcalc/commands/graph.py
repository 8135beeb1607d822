"""``symcalc graph``: what a quantity depends on and what depends on it."""

from __future__ import annotations

import json

import click

from symcalc.commands import shared


@click.command()
@shared.limited
@click.argument("name")
@click.option("--depth", type=click.IntRange(min=1), metavar="N",
              help="Follow at most N formula hops each way (default: all; --plot draws 2 unless given).")
@shared.assumptions("An option the formulas in force depend on (attention_kernel=flash, zero_stage=3, ...).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: the neighbourhood, and the graph's nodes and edges.")
@click.option("--dot", "dot_file", metavar="FILE", help="Write what gives NAME as a Graphviz DOT file.")
@click.option("--plot", "plot_file", metavar="FILE", help="Draw what gives NAME (.png/.svg/.pdf).")
@shared.STACK
@shared.FORMULAS
def graph(name, depth, options, as_json, dot_file, plot_file, stack, formula_files):
    """What a quantity depends on and what depends on it, through the library's formulas (a
    networkx graph: quantities and formulas, "appears in" and "determines" edges).

    \b
    symcalc graph step_time --depth 1
    symcalc graph tp --json
    symcalc graph mfu --plot mfu.png --depth 2
    """
    from symcalc.library import graph as G  # on use: networkx is imported only here
    from symcalc.query.implied import resolve_options  # on use: the command line starts without it (start-up, Ctrl-C)
    from symcalc.render.graph import graph_text, plot_graph  # on use: the command line starts without it

    shared.check_targets(dot=dot_file, plot=plot_file)
    lib = shared.library(formula_files)
    quantity = lib.quantity(name).name          # aliases; unknown names suggest the closest
    resolved = resolve_options(lib, shared.option_pairs(lib, options, stack), {}, {})
    g = G.dependency_graph(lib, resolved.values)
    info = G.neighbourhood(g, quantity, depth)
    sub = G.subgraph_of(g, quantity, depth)
    if dot_file is not None:
        shared.write(dot_file, G.as_dot(sub), "--dot")
    if plot_file is not None:
        plot_graph(G.subgraph_of(g, quantity, depth or 2), quantity, plot_file)
    if as_json:
        click.echo(json.dumps({**info, "options": resolved.values, **G.as_json(sub)}, indent=2))
        return
    click.echo(graph_text(lib, info, {k: v for k, v in resolved.values.items() if k in shared.option_pairs(lib, options, stack)}))
    for f in (dot_file, plot_file):
        if f:
            click.echo(f"wrote {f}")
