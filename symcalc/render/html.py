"""Results, sweeps, comparisons, checks and calibrations as HTML for Jupyter (``_repr_html_``).

Each renderer reads the record's JSON form (the same dict ``--json`` prints), so the notebook
shows what the command line says: the answer, its derivation step by step and the
assumptions behind it; a sweep's table of points with a small inline plot; a comparison's two
sides. Every string from a record is escaped.
"""

from __future__ import annotations

import base64
import html
import io
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # pragma: no cover
    from symcalc.query.calibrate import Calibration
    from symcalc.query.check import Check
    from symcalc.query.compare import Comparison
    from symcalc.query.results import Result
    from symcalc.query.sweep import Sweep

SWEEP_ROWS = 40            # points listed before "+N more"
STYLE = "border-collapse:collapse;font-size:90%"


def _e(x: object) -> str:
    return html.escape(str(x))


def _num(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, float) else _e(v)


def _table(head: list[str], rows: list[list[str]], caption: str = "") -> str:
    cap = f"<caption style='text-align:left'>{caption}</caption>" if caption else ""
    th = "".join(f"<th style='text-align:left;padding:2px 8px'>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td style='padding:2px 8px'>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table style='{STYLE}'>{cap}<thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _list(title: str, items: list[str]) -> str:
    return f"<p><b>{_e(title)}</b></p><ul>" + "".join(f"<li>{_e(i)}</li>" for i in items) + "</ul>" if items else ""


def result_html(result: Result) -> str:
    """The answer, the closed form, each step (formula as cited, what it solves for, its value),
    the defaults and options assumed, and the warnings."""
    d: dict[str, Any] = result.as_dict()
    out = [f"<p><b>{_e(d['target'])} = {_num(d['value'])} {_e(d['unit'])}</b></p>"]
    out.append(_list("Read as", list(d.get("readings") or [])))
    out.append(_list("Does it fit?", list(result.fit)))
    out.append(_list("Warnings", list(d.get("warnings") or [])))
    # the derivation folded under the answer: a step-time derivation is 60 steps long
    body = []
    if d.get("expression"):
        body.append(f"<p>closed form: <code>{_e(d['target'])} = {_e(d['expression'])}</code></p>")
    rows = []
    for i, s in enumerate(d.get("steps") or [], 1):
        values = ", ".join(f"{_e(k)} = {_num(v['value'])} {_e(v['unit'])}" for k, v in (s.get("values") or {}).items())
        rows.append([str(i), _e(s.get("title", "")), f"<code>{_e(s.get('equation', ''))}</code>", values])
    if rows:
        body.append(_table(["step", "formula", "as cited", "gives"], rows, "Derivation"))
    assumed = [f"{k} = {v['value']} ({v.get('source', '')})" for k, v in (d.get("defaults_used") or {}).items()]
    assumed += [_assumption(a) for a in d.get("assumptions") or []]
    body.append(_list("Assumed", assumed))
    if rows or assumed:
        out.append(f"<details><summary>derivation ({len(rows)} steps) and what it assumes "
                   f"({len(assumed)})</summary>{''.join(body)}</details>")
    return "".join(out)


def _assumption(a: object) -> str:
    """An assumed option as words: ``precision = mixed_fp16_adam (the default of option ...)``."""
    if isinstance(a, dict) and "name" in a:
        return f"{a['name']} = {a.get('value', '')} ({a.get('source', '')})"
    return str(a)


def sweep_html(sweep: Sweep) -> str:
    """A table of the grid's points (axes, target, feasible) and the sweep's plot, inline."""
    from symcalc.render.plot import sweep_figure  # on use: matplotlib only when a sweep is shown
    names = [f"{a.name} [{a.unit}]" if a.unit else a.name for a in sweep.axes]
    head = names + [f"{sweep.target} [{sweep.unit}]" if sweep.unit else sweep.target, "feasible"]
    points = list(sweep.rows())
    rows = [[_num(x) for x in p[:-1]] + ["yes" if p[-1] else "no"] for p in points[:SWEEP_ROWS]]
    more = f"<p>+{len(points) - SWEEP_ROWS} more points (.to_csv() writes all)</p>" if len(points) > SWEEP_ROWS else ""
    picture = ""
    if len(sweep.axes) in (1, 2):
        buf = io.BytesIO()
        sweep_figure(sweep).savefig(buf, format="png", dpi=72)
        picture = f"<img src='data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}' width='480'/>"
    caption = f"{_e(sweep.target)} over {_e(', '.join(a.name for a in sweep.axes))}: {len(points)} points"
    warn = _list("Warnings", list(sweep.warnings) + list(sweep.reasons))
    return f"<div style='display:flex;gap:16px;align-items:flex-start'><div>{_table(head, rows, caption)}{more}</div>" \
           f"<div>{picture}</div></div>{warn}"


def comparison_html(c: Comparison) -> str:
    """The two sides, what differs between them and what they share."""
    d: dict[str, Any] = c.as_dict()
    unit = f" {d['unit']}" if d.get("unit") else ""
    a, b = d["a"], d["b"]
    rows = [["A", _num(a.get("value")) + _e(unit)], ["B", _num(b.get("value")) + _e(unit)],
            ["B - A", _num(d.get("difference")) + _e(unit)], ["B / A", _num(d.get("ratio"))]]
    differs = ", ".join(f"{_e(x['name'])}: {_e(x['a'])} → {_e(x['b'])}" for x in d.get("differs") or [])
    same = ", ".join(f"{_e(k)} = {_e(v)}" for k, v in (d.get("same") or {}).items())
    return (f"<p><b>{_e(d['target'])}</b>: {differs}</p>" + _table(["side", d["target"]], rows)
            + (f"<p>same on both sides: {same}</p>" if same else ""))


def _pct(x: object) -> str:
    return f"{x:+.1%}" if isinstance(x, float) else "n/a"


def check_html(c: Check) -> str:
    """The verdict, whether it fits, then one row a relation (agrees or not, claimed against
    computed, how far off, through which formulas), and the values nothing relates; the
    derivations of the disagreements stay in ``.text()``."""
    d: dict[str, Any] = c.as_dict()
    bad = d["disagreements"]
    verdict = "all agree" if not bad else f"{bad} disagree{'s' if bad == 1 else ''}"
    out = [f"<p><b>{d['checked']} relation{'s' if d['checked'] != 1 else ''} checked: {verdict}</b> "
           f"(tolerance {d['rtol']:.0%})</p>"]
    out.append(_list("Does it fit?", [("ok: " if f.fits else "DOES NOT FIT: ") + f.line() for f in c.fits]))
    rows = [["ok" if r["agrees"] else "<b>FAIL</b>", _e(r["quantity"]),
             f"{_num(r['claimed'])} {_e(r['unit'])}",
             "" if r["computed"] is None else f"{_num(r['computed'])} {_e(r['unit'])}",
             _pct(r["rel_error"]), _e(", ".join(r["formulas"]) or r["message"] or "the given values")]
            for r in d["relations"]]
    if rows:
        out.append(_table(["", "quantity", "claimed", "computed", "off", "via"], rows))
    if d["unrelated"]:
        out.append(f"<p>not related to the others by any formula: {_e(', '.join(d['unrelated']))}</p>")
    return "".join(out)


def calibration_html(cal: Calibration) -> str:
    """Each run measured against its prediction before and after the fit, the mean error, and
    each coefficient from its prior to its fitted value (as the text says it)."""
    d: dict[str, Any] = cal.as_dict()
    runs = [[_e(r["id"]), _num(r["measured_step_time_s"]), _num(r["predicted_before_s"]),
             _num(r["predicted_after_s"]), _pct(r["error_before"]), _pct(r["error_after"])] for r in d["runs"]]
    m = d["mean_abs_error"]
    runs.append(["<b>mean |error|</b>", "", "", "", f"{m['before']:.1%}" if m["before"] is not None else "n/a",
                 f"{m['after']:.1%}" if m["after"] is not None else "n/a"])
    coefs = [[_e(c["name"]), _e(f"{c['scope']} {c['key']}"), _e(c["prior_text"]), _e(c["fitted_text"]),
              "held at its bound" if c["held"] else "moved" if c["moved"] else "kept its prior"]
             for c in d["coefficients"]]
    head = (f"<p><b>Calibration of {_e(d['name'])}</b>: {len(d['runs'])} measured steps on "
            f"{_e(d['base_hardware'])}, stack {_e(', '.join(d['stacks']))}</p>")
    wrote = f"<p>wrote {_e(d['profile'])}: use it as hardware={_e(repr(d['profile']))}</p>" if d["profile"] else ""
    return (head + _table(["run", "measured [s]", "predicted before [s]", "after [s]", "error before", "after"], runs)
            + _table(["coefficient", "of", "prior", "fitted", ""], coefs) + _list("Notes", d["notes"]) + wrote)
