"""Terminal tables for ``symcalc list`` and ``symcalc show`` (rich; plain when piped)."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from symcalc.library.records import said_with
from symcalc.units.format import fmt


def _console() -> Console:
    return Console(highlight=False, soft_wrap=False)


def _cells(*values: object) -> list[Text]:
    """Cells as rich Text, so '[0, inf)' or '[FLOP]' is printed, not read as markup."""
    return [Text(str(v)) for v in values]


def print_catalog(entries: dict[str, list[dict]]) -> None:
    console = _console()
    if entries.get("quantities"):
        t = Table(title=f"Quantities ({len(entries['quantities'])})", title_justify="left")
        t.add_column("name", style="bold", no_wrap=True)
        t.add_column("unit")
        t.add_column("description (aliases; default)", ratio=1, overflow="fold")
        for q in entries["quantities"]:
            extra = ", ".join(q["aliases"])
            if q["default"] is not None:
                extra = (extra + "; " if extra else "") + f"default {q['default']}"
            t.add_row(*_cells(q["name"], q["unit"], q["description"] + (f" ({extra})" if extra else "")))
        console.print(t)
    if entries.get("formulas"):
        t = Table(title=f"Formulas ({len(entries['formulas'])})", title_justify="left")
        t.add_column("id", style="bold", overflow="fold", max_width=28)
        t.add_column("equation", overflow="fold", ratio=1)
        t.add_column("when / kind", overflow="fold")
        for f in entries["formulas"]:
            when = ", ".join(f"{k}={'|'.join(v)}" for k, v in f["when"].items())
            kind = "" if f.get("kind", "law") == "law" else f["kind"]
            t.add_row(*_cells(f["id"], f["equation"], "; ".join(x for x in (when, kind) if x)))
        console.print(t)
    if entries.get("options"):
        t = Table(title=f"Options ({len(entries['options'])})", title_justify="left")
        t.add_column("option", style="bold", no_wrap=True)
        t.add_column("values (default first)")
        t.add_column("description", overflow="fold")
        for o in entries["options"]:
            values = [o["default"]] + [v for v in o["values"] if v != o["default"]]
            t.add_row(*_cells(o["name"], " | ".join(values), o["description"]))
        console.print(t)


def print_description(info: dict) -> None:
    console = _console()
    kind = info["kind"]
    title = info.get("name") or info.get("id")
    t = Table(title=f"{kind} {title}", title_justify="left", show_header=False)
    t.add_column("field", style="bold", no_wrap=True)
    t.add_column("value", overflow="fold")
    for key, value in info.items():
        if key in ("kind", "name", "id") or value in (None, "", [], {}, False):
            continue
        if isinstance(value, dict):
            value = "\n".join(f"{k}: {_flat(v)}" for k, v in value.items())
        elif isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        t.add_row(*_cells(key.replace("_", " "), value))
    console.print(t)


def _flat(v: object) -> str:
    if isinstance(v, dict) and "description" in v:   # an option value: what it means, what it sets
        text = str(v["description"])
        if v.get("sets"):
            text += " (sets " + ", ".join(f"{k} = {x}" for k, x in v["sets"].items()) + ")"
        if v.get("options"):
            text += "\n    options: " + ", ".join(f"{k}={x}" for k, x in v["options"].items())
        if v.get("supports"):
            text += "\n    supports: " + "; ".join(f"{k} {' | '.join(x)}" for k, x in v["supports"].items())
        for r in v.get("requires", ()):
            text += f"\n    requires: {said_with(r['when'], r.get('with', {}))} ({r['why']})"
        return text
    if isinstance(v, dict):
        parts = [f"{k}={_flat(x)}" for k, x in v.items() if x not in (None, "", {}, [])]
        return "; ".join(parts)
    if isinstance(v, list):
        return ", ".join(str(x) for x in v)
    return str(v)


# the unit is in the header, the cell holds the number only: "312 TFLOP/s" in a cell of an
# 80-column table was cut to "TFLOP…" (issue 40); a number is never cut (no_wrap, and the unit
# out of the cell leaves room for it)
_HW_COLUMNS = [("memory\nGB", "gpu_memory"), ("HBM\nGB/s", "hbm_bandwidth"), ("BF16\ndense\nTFLOP/s", "peak_flops_bf16"),
               ("FP8\ndense\nTFLOP/s", "peak_flops_fp8"), ("NVLink\n/dir\nGB/s", "nvlink_bandwidth"),
               ("NIC\nGb/s", "nic_bandwidth"), ("TDP\nW", "gpu_power")]
# (header, the preset's key, how a cell says it): "count" as people say a model's size (175B),
# "thousands" as they say a vocabulary (128k), "over" with the key after the slash (heads/KV heads)
_MODEL_COLUMNS = [("params", "n_params", "count"), ("layers", "n_layers", ""), ("d_model", "d_model", ""),
                  ("heads\n/kv", "n_heads", "over n_kv_heads"), ("d_ffn", "d_ffn", ""),
                  ("vocab", "vocab_size", "thousands"), ("experts", "n_experts", "")]


def _preset_cells(kind: str, values: dict) -> list[str]:
    """A preset's row after its name: hardware figures in their columns' units, a model's counts
    as people say them."""
    if kind == "hardware":
        return [_in_unit(values.get(key, "-"), header) for header, key in _HW_COLUMNS]
    return [_model_cell(values, key, how) for _, key, how in _MODEL_COLUMNS]


def _model_cell(values: dict, key: str, how: str) -> str:
    """One cell of a model's row, said as ``how`` says (see _MODEL_COLUMNS)."""
    value = values.get(key, "-")
    try:
        x = float(value)
    except ValueError:
        return value
    if how == "count" and abs(x) >= 1e9:
        return f"{x / 1e9:.3g}B"
    if how == "thousands" and abs(x) >= 1e4:
        return f"{x / 1e3:.3g}k"
    if how.startswith("over ") and how[5:] in values:
        return f"{value}/{values[how[5:]]}"
    return value


def _in_unit(value: str, header: str) -> str:
    """A preset's value ("1.555 TB/s") as a number in the unit its column's header ends with
    (GB/s: 1555); as written when it is not a quantity of that unit."""
    from symcalc.units import parse_quantity  # on use: pint only when a table of presets is printed
    unit = header.split()[-1]
    try:
        return fmt(float(parse_quantity(value).to(unit).magnitude))
    except Exception:       # "-", or a value pint reads in another dimension: shown as it is
        return value


def print_presets(entries: dict[str, list[dict]]) -> None:
    """One row per preset, one column per key figure (sources: `symcalc list KIND --json`)."""
    console = _console()
    for kind, rows in entries.items():
        if not rows:
            continue
        headers = [c[0] for c in (_HW_COLUMNS if kind == "hardware" else _MODEL_COLUMNS)]
        title = f"{'Hardware' if kind == 'hardware' else 'Models'} ({len(rows)}; sources: --json)"
        # the models' nine columns fit 80 characters only without vertical rules, one space apart
        t = Table(title=title, title_justify="left") if kind == "hardware" else \
            Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=0, pad_edge=False, show_edge=False)
        table = [[r["name"]] + _preset_cells(kind, r["values"]) for r in rows]
        # each column at least as wide as its widest cell: rich narrows a column to fit the
        # terminal, and would cut a number ("TFLOP…") or fold a name
        widest = [max(len(row[i]) for row in table) for i in range(len(headers) + 1)]
        t.add_column("name", style="bold", no_wrap=True, min_width=widest[0])
        for header, width in zip(headers, widest[1:]):
            t.add_column(header, justify="right", min_width=width)
        if kind == "models":
            t.add_column("options")
        for r, cells in zip(rows, table):
            if kind == "models":
                o = r["options"]
                cells.append(" ".join(x for x in (o.get("attention", ""), o.get("ffn", ""),
                                                  "tied" if o.get("tied_embeddings") == "true" else "") if x))
            t.add_row(*_cells(*cells))
        console.print(t)
