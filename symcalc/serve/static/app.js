// symcalc serve: every input asks the server again, 200 ms after the last key stroke; an answer
// that arrives after a newer question was asked is dropped (each panel keeps its latest only).
"use strict";

const $ = (id) => document.getElementById(id);
const DEBOUNCE_MS = 200;

function debounce(fn) {
  let timer = null;
  return () => { clearTimeout(timer); timer = setTimeout(fn, DEBOUNCE_MS); };
}

// one panel's latest request: a newer one aborts the older
const pending = {};
async function ask(panel, path, body) {
  if (pending[panel]) pending[panel].abort();
  const control = new AbortController();
  pending[panel] = control;
  $(panel + "-status").textContent = "working…";
  try {
    const r = await fetch(path, {method: "POST", headers: {"Content-Type": "application/json"},
                                 body: JSON.stringify(body), signal: control.signal});
    const data = await r.json();
    if (pending[panel] !== control) return null;
    $(panel + "-status").textContent = "";
    return data;
  } catch (e) {
    if (e.name === "AbortError") return null;
    $(panel + "-status").textContent = "";
    return {error: {kind: "network", message: "no answer from the server (" + e.message + ")"}};
  }
}

function showError(panel, data) {
  const box = $(panel + "-error");
  if (data && data.error) {
    box.textContent = "error: " + data.error.message;
    box.dataset.kind = data.error.kind;
    box.hidden = false;
    return true;
  }
  box.hidden = true;
  box.textContent = "";
  return false;
}

function esc(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}

function num(x, digits = 4) {
  if (x === null || x === undefined) return "";
  if (typeof x !== "number") return String(x);
  if (x !== 0 && (Math.abs(x) >= 1e6 || Math.abs(x) < 1e-3)) return x.toExponential(digits - 1);
  return String(Number(x.toPrecision(digits)));
}

const GB = 1e9;

function intOf(id) {
  const v = $(id).value.trim();
  return v === "" ? null : Number(v);
}

function layoutValues() {
  // the degrees as typed (an error quotes them), 1 when left empty, as the GPU count reads them;
  // an empty micro-batch is searched
  const typed = (id) => $(id).value.trim();
  const v = {tp: typed("tp") || "1", pp: typed("pp") || "1", dp: typed("dp") || "1"};
  if (typed("micro_batch_size")) v.micro_batch_size = typed("micro_batch_size");
  return v;
}

function run() {
  const cfg = $("model_config").value.trim();
  return {
    model: cfg ? null : ($("model").value || null),
    model_config: cfg || null,
    hardware: $("hardware").value || null,
    stack: $("stack").value,
    options: {zero_stage: $("zero_stage").value, recompute: $("recompute").value},
  };
}

function gpus() {
  const n = (intOf("tp") || 1) * (intOf("pp") || 1) * (intOf("dp") || 1);
  $("n_gpus").textContent = String(n);
  return n;
}

function table(head, rows) {
  return "<table><thead><tr>" + head.map((h) => `<th>${esc(h)}</th>`).join("") + "</tr></thead><tbody>" +
    rows.map((r) => "<tr>" + r.map((c, i) => `<td${i ? ' class="n"' : ""}>${c}</td>`).join("") + "</tr>").join("") +
    "</tbody></table>";
}

function bars(parts, scale, unit) {
  const entries = Object.entries(parts).filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]);
  const total = entries.reduce((s, [, v]) => s + v, 0) || 1;
  return table(["part", unit, "share"], entries.map(([k, v]) => [
    esc(k), num(v / scale), `<span class="bar" style="width:${(60 * v / total).toFixed(0)}px"></span>${(100 * v / total).toFixed(0)} %`]));
}

// the batch shape the layout panel planned with (the plan's default global batch, about 4M
// tokens, where the field is empty): the solve box reads the run with the same shape
let runShape = {}, runOptions = {};
let layoutDone = Promise.resolve();

function updateLayout() {
  layoutDone = planLayout();
  return layoutDone;
}

async function planLayout() {
  const r = run();
  const body = {...r, gpus: gpus(), top: 1, seq_len: intOf("seq_len"), global_batch_size: intOf("global_batch_size"),
                values: layoutValues()};
  const data = await ask("layout", "/api/plan", body);
  if (data === null) return;
  runShape = data.error ? {} : {seq_len: data.seq_len, global_batch_size: data.global_batch_size};
  // and the options it chose where the form leaves them open (sequence parallelism, the schedule)
  runOptions = (!data.error && data.rows && data.rows[0]) ? data.rows[0].options : {};
  if (showError("layout", data)) { $("layout-out").innerHTML = ""; return; }
  const row = data.rows && data.rows[0];
  if (!row) {
    $("layout-out").innerHTML = noFit(data, "this layout does not fit");
    return;
  }
  $("layout-out").innerHTML =
    `<p class="headline" id="layout-headline">${esc(row.label)}: step ${num(row.step_time_s)} s, ` +
    `${num(row.memory_per_gpu_bytes / GB)} GB per GPU of ${num(data.gpu_memory_bytes / GB)} GB, ` +
    `MFU ${num(100 * row.metrics.mfu, 3)} %</p>` +
    `<div class="two"><div><h3>Memory per GPU (GB)</h3>${bars(row.memory_parts_bytes, GB, "GB")}</div>` +
    `<div><h3>Step time (s)</h3>${bars(row.step_parts_s, 1, "s")}</div></div>`;
}

async function updateTop() {
  const r = run();
  const body = {model: r.model, model_config: r.model_config, hardware: r.hardware, stack: r.stack, gpus: gpus(),
                top: 5, seq_len: intOf("seq_len"), global_batch_size: intOf("global_batch_size")};
  const data = await ask("top", "/api/plan", body);
  if (data === null) return;
  if (showError("top", data)) { $("top-out").innerHTML = ""; return; }
  if (!data.rows || !data.rows.length) {
    $("top-out").innerHTML = noFit(data, "nothing fits");
    return;
  }
  // ranked by the planned step (the model's own, held to the published runs where capped): both
  // shown, so that rows the cap makes alike still differ where the model tells them apart
  // the rank key is the planned step in bands of tie_band from the fastest, the simplest first
  // within a band: the band said once, on its first row (a blank one ties with the row above)
  const width = 100 * (data.tie_band || 0);
  const band = (row, i) => row.step_band === null || row.step_band === undefined ||
    (i > 0 && data.rows[i - 1].step_band === row.step_band) ? "" :
    `+${(row.step_band * width).toFixed(0)}-${((row.step_band + 1) * width).toFixed(0)} %`;
  $("top-out").innerHTML = `<p class="key" id="top-key">ranked by planned step time in bands of ${width.toFixed(0)} % ` +
    `from the fastest (the model's resolution), the simplest layout first within a band; a blank band ties with ` +
    `the row above</p>` +
    table(["#", "step band", "layout", "planned step (s)", "model's step (s)", "GB/GPU", "MFU %"], data.rows.map((row, i) => [
      String(row.rank), band(row, i), esc(row.label), num(row.planned_step_time_s ?? row.step_time_s),
      row.capped_at_frontier ? num(row.step_time_s) : "same", num(row.memory_per_gpu_bytes / GB),
      num(100 * row.metrics.mfu, 3)]));
}

// the server's sentence in the page's words (the command line's "--option NAME=VALUE" is the
// page's NAME = VALUE), and the memory parts of the closest layout, the reason it does not fit
function noFit(data, fallback) {
  const said = (data.message || fallback).replace(/--option\s+([\w.]+)=(\S+)/g, "$1 = $2").replace(/--([a-z][\w-]*)/g, "$1");
  const near = (data.closest || [])[0];
  if (!near || !near.memory_parts_bytes) return `<p class="nofit">${esc(said)}</p>`;
  return `<p class="nofit">${esc(said)}</p><h3 id="nofit-title">Memory per GPU of the closest layout, ${esc(near.label)}: ` +
    `${num(near.memory_per_gpu_bytes / GB)} GB of ${num(data.gpu_memory_bytes / GB)} GB</h3>` +
    `<div class="nofit-parts">${bars(near.memory_parts_bytes, GB, "GB")}</div>`;
}

// NAME=VALUE pairs: one a line, or several on a line separated by spaces (a value may hold spaces:
// a new pair starts where a NAME= does); quotes around a pair or a value are dropped
function pairs(text) {
  const out = {};
  for (const line of text.split(/\n/)) {
    for (let item of line.trim().split(/\s+(?=["']?[A-Za-z_][A-Za-z0-9_]*=)/)) {
      item = item.trim().replace(/^(["'])(.*)\1$/, "$2");
      if (!item) continue;
      const at = item.indexOf("=");
      if (at < 0) throw new Error(`expected a value as NAME=VALUE, got '${item}'`);
      const name = item.slice(0, at).trim();
      const value = item.slice(at + 1).trim().replace(/^(["'])(.*)\1$/, "$2");
      if (!name) throw new Error(`'${item}': the name before '=' is missing`);
      if (!value) throw new Error(`${name}= has no value (write e.g. ${name}=64)`);
      if (name in out) throw new Error(`${name} is given twice`);
      out[name] = value;
    }
  }
  return out;
}

// MathJax typesets only when this server has it (the serve extra); without it the page says so
// and shows each step as plain text, never as raw TeX
function mathjax() {
  return Boolean(window.MathJax && MathJax.typesetPromise);
}

// a step's numbers: what it solved for, with units ("n_active_params = 7e+9"), else its expression
function stepValues(s) {
  const vals = Object.entries(s.values || {});
  if (vals.length) return vals.map(([k, v]) => `${k} = ${num(v.value, 6)}${v.unit ? " " + v.unit : ""}`).join(", ");
  return Object.entries(s.expression || {}).map(([k, v]) => k + " = " + v).join(", ");
}

// an assumption or note as a sentence: "weight_dtype = bf16: the default of option ..."
function sentence(n) {
  if (typeof n === "string") return n;
  if (n.name) return `assuming ${n.name} = ${n.value}` + (n.source ? `: ${n.source}` : "");
  if (n.text || n.message) return n.text || n.message;
  return Object.entries(n).filter(([, v]) => v !== null && typeof v !== "object").map(([k, v]) => `${k} ${v}`).join(", ");
}

function typeset(el) {
  if (mathjax()) {
    MathJax.typesetClear([el]);
    MathJax.typesetPromise([el]).catch(() => {});
  }
}

async function updateSolve() {
  let values;
  try {
    values = pairs($("pairs").value);
  } catch (e) {
    showError("solve", {error: {kind: "usage", message: e.message}});
    return;
  }
  const body = {target: $("target").value.trim(), values: values};
  if ($("use-run").checked) {
    // the whole run above: its presets and options, and its layout as the layout panel reads it,
    // which the answer reads where the pairs leave it open (symcalc.query.runlayout)
    await layoutDone;       // the shape the layout panel planned with, when its fields are empty
    Object.assign(body, run());
    body.options = {...runOptions, ...body.options};
    body.layout = layoutValues();
    for (const id of ["seq_len", "global_batch_size"]) {
      if ($(id).value.trim()) body.layout[id] = $(id).value.trim();
      else if (runShape[id]) body.layout[id] = String(runShape[id]);
    }
  }
  const data = await ask("solve", "/api/solve", body);
  if (data === null) return;
  if (showError("solve", data)) {
    $("answer").textContent = "";
    $("derivation").innerHTML = "";
    return;
  }
  const unit = data.unit ? " " + data.unit : "";
  let line = `${data.target} = ${num(data.value, 6)}${unit}`;
  if (data.exact !== null && data.exact !== undefined) line += `  (exact ${num(data.exact, 6)})`;
  $("answer").textContent = line;
  const steps = (data.steps || []).map((s, i) =>
    `<li><b>${esc(s.title)}</b> <span class="src">[${esc(s.formula)}]</span>` +
    (mathjax() ? `<div class="math">\\(${esc(s.latex)}\\)</div>` : "") +
    `<div class="eq"><code>${esc(s.equation)}</code> → <code class="value">${esc(stepValues(s))}</code></div></li>`).join("");
  const notes = [...(data.assumptions || []), ...(data.notes || []), ...(data.warnings || [])]
    .map((n) => `<li>${esc(sentence(n))}</li>`).join("");
  // a given value read as its counterpart changes what was asked: said first (symcalc.query.rescope)
  const readings = (data.readings || []).map((n) => `<p class="reading">Reading: ${esc(n)}</p>`).join("");
  $("derivation").innerHTML = readings + runLine(data.run) + (data.fit || []).map(fitLine).join("") +
    (data.latex && mathjax() ? `<div class="closed"><h3>Closed form</h3><div class="math">\\[${esc(data.latex)}\\]</div></div>` : "") +
    `<h3>Derivation (${(data.steps || []).length} steps)</h3><ol>${steps}</ol>` +
    (notes ? `<h3>Notes</h3><ul>${notes}</ul>` : "");
  typeset($("derivation"));
}

// the run the answer is about (the JSON's "run": symcalc.query.run), as the command line's
// "run:" line says it: workload, presets, stack and why, each group's degree and first link
function runLine(run) {
  if (!run) return "";
  const groups = run.groups.filter(g => g.degree !== null);
  if (!((run.workload && (run.model || run.hardware)) || groups.some(g => g.origin !== "default"))) return "";
  let what = (run.workload || "a run") + (run.model ? ` of ${run.model}` : "") + (run.hardware ? ` on ${run.hardware}` : "");
  const stack = Object.entries(run.stack || {}).map(([k, v]) => `${k} = ${v}`).join(", ");
  what += stack ? `, ${stack} (${run.stack_why === "given" ? "given" : "the default"})` : ", no stack (the formulas' own defaults)";
  const parts = groups.map(g => {
    const said = [g.origin].filter(Boolean);
    if (g.spans && g.degree > 1) said.push(g.spans);
    const link = Object.entries(g.links || {})[0];
    if (link) said.push(`${link[0]} = ${num(link[1].value)} ${link[1].unit}`);
    return `${g.name} = ${num(g.degree)}` + (said.length ? ` (${said.join("; ")})` : "");
  });
  return `<p class="run" id="run">run: ${esc(what)}${parts.length ? "; " + esc(parts.join(", ")) : ""}</p>`;
}

// the answer's fit verdict (the JSON's "fit": the run's workload memory against the GPU's), as
// the command line says it
function fitLine(f) {
  const v = f.values, u = v.unit ? " " + v.unit : "";
  const said = `workload = ${v.workload}`;
  if (!v.fits) {
    const largest = v.largest ? `; the largest part is ${v.largest[0]} = ${num(v.largest[1])}${u}` : "";
    return `<p class="nofit" id="fit">DOES NOT FIT: ${esc(f.quantity)} = ${num(v.value)}${u} exceeds ` +
           `${num(v.limit)}${u} by ${num(v.excess)}${u}${esc(largest)} (${esc(said)})</p>`;
  }
  const tight = v.tight ? `, but tight (under the ${num(v.advised)}${u} a run keeps free)` : "";
  return `<p class="fits" id="fit">fits${esc(tight)}: ${esc(f.quantity)} = ${num(v.value)}${u} of ${num(v.limit)}${u} ` +
         `(${num(v.free)}${u} free; ${esc(said)})</p>`;
}

async function loadPresets() {
  const r = await fetch("/api/presets");
  const data = await r.json();
  const fill = (id, items, pick) => {
    $(id).innerHTML = items.map((p) => `<option value="${esc(p.name)}"${p.name === pick ? " selected" : ""}>` +
                                      `${esc(p.name)}: ${esc(p.title)}</option>`).join("");
  };
  if (data.error) { showError("layout", data); return; }
  const kinds = Object.keys(data), asked = new URLSearchParams(location.search);
  fill("model", data[kinds[0]], asked.get("model") || "llama3_8b");
  fill("hardware", data[kinds[1]], asked.get("hardware") || "h100_sxm");
}

// the permalink: every field of the question in the URL (?target=mfu&pairs=...), kept up to date
// as it is typed; a page opened at such a URL asks that question (a pasted config.json is not kept)
const KEPT = ["model", "hardware", "tp", "pp", "dp", "micro_batch_size", "seq_len", "global_batch_size",
              "stack", "zero_stage", "recompute", "target", "pairs", "use-run"];

function toUrl() {
  const q = new URLSearchParams();
  for (const id of KEPT) {
    const el = $(id);
    if (el.type === "checkbox") { if (el.checked) q.set(id, "1"); } else if (el.value !== "") q.set(id, el.value);
  }
  history.replaceState(null, "", "?" + q.toString());
}

function fromUrl() {
  const q = new URLSearchParams(location.search);
  for (const id of KEPT) {
    if (!q.has(id) || id === "model" || id === "hardware") continue;   // those two once the presets are in
    const el = $(id);
    if (el.type === "checkbox") el.checked = q.get(id) === "1"; else el.value = q.get(id);
  }
}

function start() {
  const layout = debounce(updateLayout), top = debounce(updateTop), solve = debounce(updateSolve);
  for (const id of ["model", "model_config", "hardware", "tp", "pp", "dp", "micro_batch_size", "seq_len",
                    "global_batch_size", "stack", "zero_stage", "recompute"]) {
    $(id).addEventListener("input", () => { toUrl(); gpus(); layout(); top(); if ($("use-run").checked) solve(); });
  }
  for (const id of ["target", "pairs", "use-run"]) $(id).addEventListener("input", () => { toUrl(); solve(); });
  $("maths-note").textContent = mathjax() ? "Derivations typeset by MathJax served from this machine."
    : "MathJax is not installed on this server (pip install 'symcalc[serve]'), so derivations show as plain text.";
  fromUrl();
  gpus();
  loadPresets().then(() => { updateLayout(); updateTop(); if ($("use-run").checked) updateSolve(); });
  if (!$("use-run").checked) updateSolve();
}

document.addEventListener("DOMContentLoaded", start);
