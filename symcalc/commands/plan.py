"""``symcalc plan``: every parallel layout of a run searched, the ones that fit ranked."""

from __future__ import annotations

import json
import sys

import click

from symcalc.budget import DEFAULT_PLAN_LIMIT
from symcalc.commands import shared
from symcalc.query.requests import CLI, PlanRequest


@click.command()
@shared.limited(default=DEFAULT_PLAN_LIMIT)     # a first plan solves up to 48 option combinations (budget.py)
@shared.VALUES
@click.option("--gpus", "gpus", metavar="N|A:B|N1,N2,...", callback=shared.given,
              help="GPU count; a range A:B (A, then 2^k and 3x2^k multiples of the node size up to B) or a "
              "list with --deadline, --budget or a throughput target.")
@click.option("--tokens", metavar="TOKENS", callback=shared.given,
              help="Training tokens, e.g. 15e12 (for days, GPU-hours and cost; default the model preset's).")
@click.option("--global-batch-size", "global_batch_size", metavar="SEQUENCES", callback=shared.given,
              help="Global batch in sequences (or give \"global_batch_tokens=...\"); default about 4M tokens, "
                   "a power of two of sequences, said in the notes.")
@click.option("--seq-len", "seq_len", metavar="TOKENS", callback=shared.given, help="Sequence length (default the model's).")
@click.option("--gpus-per-node", "gpus_per_node", metavar="N", callback=shared.given,
              help="GPUs a node (default the hardware's, usually 8).")
@shared.assumptions("Fix an option (zero_stage=3 fixes a searched one; attention_kernel=flash, precision=...).")
@click.option("--by", type=click.Choice(["time", "days", "gpu_hours", "cost", "memory"]), default="time",
              show_default=True, help="Rank by step time, training days, GPU-hours, cost or memory per GPU.")
@click.option("--top", default=10, show_default=True, metavar="K", help="Show the K best layouts.")
@click.option("--headroom", "memory_headroom", metavar="GB", callback=shared.given,
              help="Memory each GPU keeps free beyond what the model counts (the allocator's reserve, CUDA "
                   "context and NCCL are counted: the stack sets memory_figure=device); default 5 % of gpu_memory: "
                   "4 GB on an 80 GB GPU.")
@click.option("--price", "gpu_hour_price", metavar="USD/hour", callback=shared.given,
              help="GPU-hour price, e.g. \"2 USD/hour\" (for cost).")
@click.option("--deadline", metavar="TIME", callback=shared.given,
              help="Find the fewest GPUs (of --gpus) whose best layout trains --tokens within TIME, e.g. 90day.")
@click.option("--budget", metavar="USD", callback=shared.given,
              help="Find the fastest plan (of --gpus) within a budget, e.g. 2e6USD (needs --price).")
@click.option("--tp-across-nodes", is_flag=True, help="Allow tp beyond one node.")
@click.option("--even-stages", is_flag=True, help="Only pp dividing n_layers (no uneven split).")
@click.option("--no-frontier", is_flag=True,
              help="Rank every layout by the model's own step time, even one the model puts beyond the best MFU "
                   "published for its hardware and size class (by default such a layout, unless published runs of "
                   "its regime validate it, is ranked at that MFU).")
@click.option("--explain", "explain", type=int, metavar="RANK",
              help="Print the whole derivation of layout RANK's step time and memory (symcalc solve's).")
@click.option("--latex", "latex_file", metavar="FILE",
              help="With --explain: write that layout's step-time derivation as a LaTeX document.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--csv", "csv_file", metavar="FILE", help="Write the top layouts as CSV.")
@click.option("--plot", "plot_file", metavar="FILE",
              help="Draw step time against memory (Pareto front) and the top layouts' breakdowns (.png/.svg/.pdf).")
@shared.RUN
def plan(values, gpus, tokens, global_batch_size, seq_len, gpus_per_node, options, by, top, memory_headroom,
         gpu_hour_price, deadline, budget, tp_across_nodes, even_stages, no_frontier, explain, latex_file, as_json,
         csv_file, plot_file, hardware, model, stack, formula_files):
    """Search every parallel layout (tp, pp, cp, dp, ep, micro-batch, schedule, ZeRO, recompute,
    sequence parallelism) of a run, keep those that fit, rank them. NAME=VALUE pairs fix values
    (pp=1, "buffer_memory=4 GB", "tokens_per_second=2e6 token/s" as a throughput target).
    Goals given together (--deadline with --budget, or with a throughput target) are all met:
    the fewest GPUs meeting every one (the fastest within a budget alone), and which one binds.

    \b
    symcalc plan --model gpt3-175b --hardware a100-80gb --gpus 1024 --global-batch-size 1536
    symcalc plan --model llama3-70b --hardware h100 --gpus 1024:16384 --tokens 15e12 --deadline 90day \\
        --global-batch-size 2048 --price "2 USD/hour" --option attention_kernel=flash
    """
    from symcalc.planner import prewarm  # on use, as the planner below
    from symcalc.planner.search import (
        plan as api_plan,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    prewarm.allow()     # one plan a process, no thread of its own: a cold plan may use a second core
    if latex_file is not None and explain is None:
        raise shared.CliError("--latex needs --explain RANK (the layout whose derivation to write)")
    if sum(x is not None for x in (latex_file if latex_file == "-" else None,)) and as_json:
        raise shared.CliError("--json and --latex - would both write to standard output")
    shared.check_targets(latex=latex_file, csv=csv_file, plot=plot_file)
    request = PlanRequest(model=model, hardware=hardware, gpus=gpus, tokens=tokens, global_batch_size=global_batch_size,
                          seq_len=seq_len, gpus_per_node=gpus_per_node, options=shared.pairs(options, "an option"),
                          stack=stack, by=by, top=max(top, explain or 0) if top >= 1 else top,
                          memory_headroom=memory_headroom, gpu_hour_price=gpu_hour_price, deadline=deadline,
                          budget=budget, tp_across_nodes=tp_across_nodes, uneven_pp=not even_stages,
                          values=shared.pairs(values, "a value"), frontier=not no_frontier)
    request.checked(CLI)
    lib = shared.library(formula_files)
    args, kwargs = request.arguments(lib, CLI)
    line = shared.ProgressLine() if sys.stderr.isatty() else None
    try:
        result = api_plan(*args, **kwargs, progress=line)
    finally:
        if line is not None:
            line.stop()
    if csv_file is not None:
        result.to_csv(csv_file)
    if plot_file is not None:
        result.plot(plot_file)
    if explain is not None:
        from symcalc.planner.explain import (
            explain as api_explain,  # on use: the command line starts without it (start-up, Ctrl-C)
        )
        step, memory = api_explain(result, explain, library=lib)
        if latex_file is not None:
            shared.write(latex_file, step.latex(standalone=True), "--latex")
        if as_json:
            click.echo(json.dumps({"plan": result.as_dict(), "rank": explain, "step_time": step.as_dict(),
                                   "total_memory_per_gpu": memory.as_dict()}, indent=2))
            return
        if latex_file == "-":
            return
        row = result.rows[explain - 1]
        click.echo(f"#{explain}: {row.label()} on {result.n_gpus} x {result.hardware}")
        click.echo(f"$ {row.command}")
        click.echo("")
        click.echo(step.text())
        click.echo("")
        click.echo(memory.text())
        return
    if as_json:
        click.echo(result.json())
    else:
        # on a terminal (or under COLUMNS) the table fits its width (columns left out, and named)
        # and the sentences wrap; piped, all of it, each line whole
        from symcalc.render.wrap import width  # on use: the command line starts without it
        columns = width()
        shared.echo_wrapped(result.text(width=columns), columns)
        for f in (csv_file, plot_file):
            if f:
                click.echo(f"wrote {f}")
    if not result.rows:
        raise click.exceptions.Exit(1)
