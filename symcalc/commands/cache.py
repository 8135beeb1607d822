"""``symcalc cache``: see or clear the on-disk cache."""

from __future__ import annotations

import json

import click


@click.group("cache", invoke_without_command=True)
@click.pass_context
def cache_group(ctx):
    """See or clear the on-disk cache of loaded libraries, derivations and parsed units.

    \b
    symcalc cache info
    symcalc cache clear
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(cache_info)


@cache_group.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def cache_info(as_json=False):
    """Where the cache is, whether it is on, and what it holds (entries by kind, bytes).

    \b
    symcalc cache info
    symcalc cache info --json
    """
    from symcalc import cache  # on use: the command line starts without it (start-up, Ctrl-C)
    got = cache.info()
    if as_json:
        click.echo(json.dumps(got, indent=2))
        return
    state = f"not used: {got['refused']}" if got.get("refused") else "on" if got["enabled"] else "off"
    click.echo(f"cache: {got['directory']} ({state}; SYMCALC_CACHE_DIR to move it, "
               "SYMCALC_NO_CACHE=1 to turn it off)")
    click.echo(f"key:   {got['key_directory']}")
    for kind, e in sorted(got["entries"].items()):
        click.echo(f"  {kind:<11} {e['count']:>5} entries  {e['bytes'] / 1e6:8.1f} MB")
    click.echo(f"  {'in all':<11} {sum(e['count'] for e in got['entries'].values()):>5} entries  "
               f"{got['bytes'] / 1e6:8.1f} MB")


@cache_group.command("clear")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def cache_clear(as_json):
    """Delete every entry the cache wrote, pint's parsed units included, and the folders older
    versions let pint keep its own files in (files it did not write, and links, are left alone).

    \b
    symcalc cache clear
    symcalc cache clear --json
    """
    from symcalc import cache  # on use: the command line starts without it (start-up, Ctrl-C)
    removed = cache.clear()
    if as_json:
        click.echo(json.dumps({"removed": removed, "directory": str(cache.cache_dir())}))
    else:
        click.echo(f"removed {removed} entries from {cache.cache_dir()}")
