"""The docs site's reference pages, generated at build time from the code and the library data.

Nothing here is a copy: the CLI pages walk click's own command objects, the library pages read
the loaded formula library and presets (what ``symcalc formulas --latex`` renders), the Python
page reads ``symcalc.__all__``'s signatures and docstrings, and the HTTP page reads the Starlette
app's routes and the request types both faces parse (``symcalc/query/requests.py``). Other work
changes formulas and commands in parallel, so these pages are never committed: ``docs/hooks.py``
(an MkDocs hook) adds them to every build, and ``python docs/gen_reference.py OUT`` writes them
to a folder to read.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _checkout_first() -> None:
    """Import the checkout's symcalc, as the CLI runs from the worktree root (MkDocs restores
    sys.path after loading a hook, so this runs when the pages are made)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))

GENERATED_NOTE = ("*Generated when the site is built, from {what}: it cannot drift from the code. "
                  "Do not edit the built page.*\n")


def _escape(s: str) -> str:
    for ch, sub in (("\\", "\\\\"), ("|", "\\|"), ("<", "&lt;"), (">", "&gt;"), ("*", "\\*"), ("_", "\\_"),
                    ("[", "\\["), ("]", "\\]"), ("$", "\\$")):
        s = s.replace(ch, sub)
    return s


def cell(text: Any) -> str:
    """Text safe inside a Markdown table cell (and in running text): no pipes, no raw HTML, no
    emphasis made by accident of an underscore or a star. A `code span` of the text stays one
    (Python-Markdown's tables leave the pipes of a code span alone)."""
    s = " ".join(str(text).split())
    parts = s.split("`")
    if len(parts) % 2 == 0:          # an odd backtick: no code spans, the backtick shown as text
        return _escape(s).replace("`", "\\`")
    return "".join(_escape(part) if i % 2 == 0 else "`" + part + "`"
                   for i, part in enumerate(parts))


def code(text: Any) -> str:
    """An inline code span that survives backticks in the text."""
    s = " ".join(str(text).split())
    fence = "``" if "`" in s else "`"
    return f"{fence} {s} {fence}" if fence == "``" else f"`{s}`"


def math(latex: str) -> str:
    """A display equation for pymdownx.arithmatex (MathJax typesets it; without it, the TeX shows)."""
    return "\n$$\n" + latex.strip() + "\n$$\n"


# ---------------------------------------------------------------------------------------- CLI

def _clean_help(text: str | None) -> str:
    """A click docstring as Markdown: click's ``\\b`` (keep this paragraph unwrapped) blocks
    become code blocks, other paragraphs stay text."""
    if not text:
        return ""
    out = []
    for para in inspect.cleandoc(text).split("\n\n"):
        lines = para.split("\n")
        if lines[0].strip() == "\b":
            out.append("```text\n" + "\n".join(lines[1:]) + "\n```")
        else:
            out.append(cell(" ".join(lines)))
    return "\n\n".join(out)


def _command_section(cmd: Any, path: list[str], ctx: Any) -> list[str]:
    import click
    name = " ".join(path)
    sub = click.Context(cmd, info_name=path[-1], parent=ctx)
    anchor = "-".join(path)
    out = [f"## `{name}` {{#{anchor}}}", "", "```text", "Usage: " + " ".join(path[:-1] + [path[-1]])
           + " " + " ".join(cmd.collect_usage_pieces(sub)), "```", "", _clean_help(cmd.help), ""]
    args = [p for p in cmd.params if isinstance(p, click.Argument)]
    if args:
        out.append("Arguments: " + ", ".join(f"`{p.human_readable_name}`" + ("" if p.required else " (optional)")
                                             + (" (any number)" if p.nargs == -1 else "") for p in args) + ".")
        out.append("")
    records = [p.get_help_record(sub) for p in cmd.get_params(sub) if isinstance(p, click.Option)]
    rows = [r for r in records if r is not None]
    if rows:
        out += ["| option | what it does |", "|---|---|"]
        out += [f"| {code(opts)} | {cell(text)} |" for opts, text in rows]
        out.append("")
    if isinstance(cmd, click.Group):
        for sub_name in cmd.list_commands(sub):
            out += _command_section(cmd.get_command(sub, sub_name), path + [sub_name], sub)
    return out


def cli_page() -> str:
    """Every command, subcommand, argument and option of ``symcalc``, as click itself knows them
    (each help record is the line ``--help`` prints)."""
    import click

    from symcalc.commands import cli as group
    ctx = click.Context(group, info_name="symcalc")
    out = ["# Command line", "", GENERATED_NOTE.format(what="click's own command objects (`symcalc.commands`)"),
           _clean_help(group.help), ""]
    commands = {n: group.get_command(ctx, n) for n in group.list_commands(ctx)}
    out += ["| command | what it does |", "|---|---|"]
    out += [f"| [`{n}`](#{n}) | {cell(c.get_short_help_str(120))} |" for n, c in commands.items() if c is not None]
    out.append("")
    for n, c in commands.items():
        out += _command_section(c, ["symcalc", n], ctx)
    # the anchors: a heading `symcalc solve` gets the id "symcalc-solve"; the table links to "solve"
    text = "\n".join(out) + "\n"
    return re.sub(r"\]\(#(\w[\w-]*)\)", lambda m: f"](#symcalc-{m.group(1)})", text)


# ------------------------------------------------------------------------------------ library

def _unit(q: Any) -> str:
    return q.display_unit or q.unit or ("text" if q.kind == "text" else "count")


def quantities_page(lib: Any) -> str:
    """Every quantity: symbol, unit, meaning, default and its source."""
    out = ["# Quantities", "", GENERATED_NOTE.format(what="the loaded formula library (`formulas/*.toml`)"),
           f"{len(lib.quantities)} quantities. `symcalc show NAME` prints one with its formulas.", "",
           "| name | symbol | unit | meaning | default (source) |", "|---|---|---|---|---|"]
    for q in sorted(lib.quantities.values(), key=lambda q: q.name):
        default = "" if q.default is None else cell(q.default) + (f" ({cell(q.default_source)})" if q.default_source else "")
        symbol = f"${q.latex}$" if q.latex else ""
        out.append(f'| <span id="{q.name}"></span>`{q.name}` | {symbol} | {cell(_unit(q))} | '
                   f"{cell(q.description)} | {default} |")
    return "\n".join(out) + "\n"


def formulas_page(lib: Any) -> str:
    """Every formula and algorithm, by file: equation in LaTeX, what it solves for, when it
    applies, source and notes."""
    from symcalc.render.catalog import formula_kind
    by_file: dict[str, list[Any]] = {}
    for f in lib.formulas.values():
        by_file.setdefault(f.file, []).append(f)
    out = ["# Formulas", "", GENERATED_NOTE.format(what="the loaded formula library (`formulas/*.toml`)"),
           f"{len(lib.formulas)} formulas and algorithms in {len(by_file)} files. Every equation is a law in "
           "every direction: symcalc solves it for whichever quantity a question needs.", ""]
    for file in sorted(by_file):
        meta = lib.meta.get(file.rsplit(".", 1)[0], {})
        out += [f"## {cell(meta.get('title', file))}", "", cell(meta.get("description", "")) + f" (`formulas/{file}`)", ""]
        for f in by_file[file]:
            solvable = [q for q, how in f.solvability.items() if how != "none"]
            out += [f"### {cell(f.title)} {{#{f.id}}}", "", f"`{f.id}` ({formula_kind(f)}): {code(f.equation)}"]
            if f.latex:
                out.append(math(f.latex))
            facts = [f"Solvable for: {', '.join(f'`{q}`' for q in solvable)}." if solvable else ""]
            if f.when:
                facts.append("Applies when " + ", ".join(f"`{k}` = {cell(' or '.join(map(str, v)))}"
                                                         for k, v in lib.said_values(f.when).items()) + ".")
            facts.append(f"Source: {cell(f.source)}.")
            if f.notes:
                facts.append(f"Notes: {cell(f.notes)}")
            out += [" ".join(x for x in facts if x), ""]
    return "\n".join(out) + "\n"


def _option_value(o: Any, value: str, text: str, lib: Any) -> str:
    parts = [f"- `{value}`{' (default)' if str(o.default) == value else ''}: {cell(text)}"]
    if o.sets.get(value):
        parts.append("Sets " + ", ".join(f"`{k}` = {cell(v)}" for k, v in o.sets[value].items()) + ".")
    if o.option_defaults.get(value):
        parts.append("Options it sets: " + ", ".join(f"`{k}={v}`" for k, v in o.option_defaults[value].items()) + ".")
    if o.supports.get(value):
        parts.append("Runs with: " + "; ".join(f"`{k}` {', '.join(v)}" for k, v in lib.said_values(o.supports[value]).items()) + ".")
    for r in o.requires.get(value, ()):
        parts.append(f"Requires {code(r.condition.text)} ({cell(r.why)}).")
    if o.sources.get(value):
        parts.append(f"Source: {cell(o.sources[value])}.")
    return " ".join(parts)


def options_page(lib: Any, *, stacks: bool) -> str:
    """Every option (or, with ``stacks``, the training stacks: options whose values set options)."""
    chosen = [o for o in sorted(lib.options.values(), key=lambda o: o.name)
              if bool(o.option_defaults or o.supports or o.requires) == stacks]
    title = "Training stacks" if stacks else "Options"
    intro = ("A training stack is an option whose values set other options' defaults, narrow the values "
             "they run with and require conditions of the given values (`--stack NAME`)." if stacks else
             "`--option NAME=VALUE` on every command; `options={...}` in Python.")
    out = [f"# {title}", "", GENERATED_NOTE.format(what="`formulas/options.toml` and `formulas/stacks.toml` as loaded"),
           intro, ""]
    for o in chosen:
        out += [f"## `{o.name}` {{#{o.name}}}", "", cell(o.description) + f" Default: `{o.default}`.", ""]
        out += [_option_value(o, v, t, lib) for v, t in o.declared.items()]
        out.append("")
    return "\n".join(out) + "\n"


def presets_page() -> str:
    """Every hardware and model preset, each value with its source."""
    from symcalc.library.presets import all_presets
    out = ["# Presets", "", GENERATED_NOTE.format(what="the built-in presets (`formulas/presets/`)"),
           "`--hardware NAME` and `--model NAME` fill in these values; a value given on the command line wins.", ""]
    for kind, table in all_presets().items():
        out += [f"## {'Hardware' if kind == 'hardware' else 'Models'}", ""]
        for p in table.values():
            also = f" (also {', '.join(f'`{a}`' for a in p.aliases)})" if p.aliases else ""
            out += [f"### {cell(p.title)} {{#{p.key}}}", "", f"`{p.key}`{also}. {cell(p.source)}."
                    + (f" {cell(p.notes)}" if p.notes else ""), "", "| value | | source |", "|---|---|---|"]
            values = {**p.values, **{f"peak_flops ({k}, dense)": v for k, v in p.peak_flops.items()}}
            out += [f"| `{name}` | {cell(value)} | {cell(source)} |" for name, (value, source) in values.items()]
            if p.options:
                out.append(f"| options | {cell(', '.join(f'{k}={v}' for k, v in p.options.items()))} | |")
            out.append("")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------- Python API

def _doc(obj: Any) -> str:
    """A docstring as Markdown: reST roles (``:func:`x```) read as code."""
    text = inspect.getdoc(obj) or ""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _signature(name: str, obj: Any) -> str:
    try:
        return f"{name}{inspect.signature(obj)}"
    except (TypeError, ValueError):
        return name


def python_page() -> str:
    """``symcalc.__all__``: each name's signature and docstring; a class's public methods and
    properties too."""
    import symcalc
    out = ["# Python API", "", GENERATED_NOTE.format(what="`symcalc.__all__`, its signatures and docstrings"),
           _doc(symcalc), ""]
    for name in symcalc.__all__:
        obj = getattr(symcalc, name)
        if isinstance(obj, str) or inspect.ismodule(obj):
            out += [f"## `symcalc.{name}`", "", f"`{obj!r}`" if isinstance(obj, str) else _doc(obj).split("\n\n")[0], ""]
            continue
        out += [f"## `symcalc.{name}`", "", "```python", _signature(name, obj), "```", "", _doc(obj), ""]
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for attr, member in sorted(vars(obj).items()):
                if attr.startswith("_") or not (callable(member) or isinstance(member, property)):
                    continue
                target = member.fget if isinstance(member, property) else member
                label = f"{name}.{attr}" if isinstance(member, property) else _signature(f"{name}.{attr}", target)
                out += [f"### `{label}`", "", _doc(target) or "(no docstring)", ""]
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------- HTTP API

class _NoPool:
    """A stand-in for the worker pool: the routes are read, no question is asked."""

    def close(self) -> None:
        pass


def http_page() -> str:
    """The server's routes (read from the Starlette app) and each question's JSON fields (the
    request types the command line and the server share)."""
    from symcalc.query import requests
    from symcalc.serve import app as server
    web = server.create_app(pool=_NoPool())  # type: ignore[arg-type]
    out = ["# HTTP API", "", GENERATED_NOTE.format(what="the app `symcalc serve` runs and `symcalc/query/requests.py`"),
           _doc(server), "", "## Routes", "", "| path | methods |", "|---|---|"]
    for route in web.routes:
        methods = ", ".join(sorted(getattr(route, "methods", None) or {"GET"}))
        out.append(f"| `{getattr(route, 'path', route)}` | {methods} |")
    out += ["", "## Questions", "", "Every question also takes the run's fields: "
            + ", ".join(f"`{f.name}`" for f in dataclasses.fields(requests._Run)) + ". " + _doc(requests._Run), ""]
    run_fields = {f.name for f in dataclasses.fields(requests._Run)}
    kinds: dict[str, Any] = {}
    for c in vars(requests).values():          # each request type a route answers: one with a kind
        kind = getattr(c, "kind", None)
        if inspect.isclass(c) and dataclasses.is_dataclass(c) and isinstance(kind, str):
            kinds[kind] = c
    for kind, cls in kinds.items():
        out += [f"### `POST /api/{kind}` {{#{kind}}}", "", _doc(cls), "", "| field | type | default |", "|---|---|---|"]
        for f in dataclasses.fields(cls):
            if f.name in run_fields:
                continue
            default = f.default if f.default is not dataclasses.MISSING else (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else "(required)")
            out.append(f"| `{f.name}` | {cell(f.type)} | {code(repr(default))} |")
        out.append("")
    return "\n".join(out) + "\n"


def _schema_type(s: dict) -> str:
    """A field's type as words: ``string``, ``array of object``, ``number or null``."""
    if "$ref" in s:
        return "the " + s["$ref"].split(".")[0] + " object"
    if "anyOf" in s:
        return " or ".join(dict.fromkeys(_schema_type(x) for x in s["anyOf"]))
    kind = s.get("type", "any")
    if kind == "array" and "items" in s:
        return f"array of {_schema_type(s['items'])}"
    return kind


def schemas_page() -> str:
    """The JSON Schema of every --json output (symcalc/schemas/, which the tests validate the
    real outputs against): each top-level field, then the whole schema."""
    import json
    import symcalc
    folder = Path(symcalc.__file__).parent / "schemas"
    out = ["# JSON output schemas", "", GENERATED_NOTE.format(what="the JSON Schemas in `symcalc/schemas/`"), "",
           "Every command's `--json` prints one object; a refused question prints the error object (exit "
           "status 2). Each is described by a JSON Schema (draft 2020-12) shipped with the package as "
           "`symcalc/schemas/NAME.schema.json`; `tests/test_schemas.py` validates real outputs against them. "
           "Fields ending `_s` are seconds, `_bytes` bytes, `_days` days.", ""]
    order = ["solve", "sweep", "compare", "check", "plan", "calibrate", "error"]
    for name in order:
        schema = json.loads((folder / f"{name}.schema.json").read_text())
        out += [f"## {name}", "", f"{cell(schema['title'])}: {cell(schema['description'])}", "",
                "| field | type | required | meaning |", "|---|---|---|---|"]
        required = set(schema.get("required", []))
        for field, s in schema["properties"].items():
            out.append(f"| `{field}` | {cell(_schema_type(s))} | {'yes' if field in required else ''} | "
                       f"{cell(s.get('description', ''))} |")
        out += ["", f"The whole schema, `{name}.schema.json`:", "", "```json", json.dumps(schema, indent=1), "```", ""]
    return "\n".join(out) + "\n"


def pages() -> dict[str, str]:
    """Every generated page, by its path under docs/."""
    _checkout_first()
    import symcalc
    lib = symcalc.default_library()
    return {"reference/cli.md": cli_page(), "reference/quantities.md": quantities_page(lib),
            "reference/formulas.md": formulas_page(lib), "reference/options.md": options_page(lib, stacks=False),
            "reference/stacks.md": options_page(lib, stacks=True), "reference/presets.md": presets_page(),
            "reference/python.md": python_page(), "reference/http.md": http_page(),
            "reference/json.md": schemas_page()}


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "generated-reference")
    for path, text in pages().items():
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        (target / path).write_text(text)
        print(f"wrote {target / path}")
