"""Writes docs/tutorial.ipynb (outputs empty: tests/test_notebook.py executes it and checks the numbers its text states).

Run from the repository root: python docs/make_tutorial.py. Edit the cells here, not in the notebook.
Importing this module writes nothing: :func:`notebook` builds the notebook and :func:`main` writes
it (tests/test_notebook.py compares the committed notebook with :func:`notebook`).

The notebook installs nothing and downloads nothing: the project has no published repository it
controls (a GitHub organisation named like it hosts another author's project), so a kernel
without symcalc is told to install it from a checkout, and the calibration example is read from
the checkout."""
import pathlib

import nbformat as nbf

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"
md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell


def _cells() -> list:
    return [
md("""# symcalc tutorial: planning a Llama 3 8B run on H100s

One planning story, start to finish: will it fit, how long a step takes, how many GPUs a deadline
needs, what the curve looks like, which layout is best, and how to calibrate to your own cluster
once it exists. Every number comes from the formula library, with units and a derivation you can
print. (Run it top to bottom; about half a minute the first time, as derivations are built and
cached.)"""),
code("""# symcalc is installed from a checkout of its repository (see its README): the distribution is
# named symcalc-gpu; the PyPI package named symcalc is another author's
try:
    import symcalc
except ImportError:
    raise SystemExit("symcalc is not installed in this kernel: install it from a checkout (see its README)") from None"""),
md("""## 1. Will it fit?

Llama 3 8B on 64 H100s with PyTorch FSDP (ZeRO-3), 8,192-token sequences, a micro-batch of 2 and
selective recomputation. The answer is the memory per GPU as `nvidia-smi` would show it; it does
**not** fit: **140.4 GB** against 85.52 GB, most of it activations (88.1 GB)."""),
code("""layout = dict(tp=1, pp=1, dp=64, n_gpus=64, micro_batch_size=2, global_batch_size=512, seq_len="8192 token")
fsdp = {"stack": "fsdp", "zero_stage": "3"}
selective = symcalc.solve("total_memory_per_gpu", layout, model="llama3-8b", hardware="h100",
                          options={**fsdp, "recompute": "selective"})
print(f"{selective.value:.1f} {selective.unit}")
print(selective.warnings[0] if selective.warnings else "")"""),
md("""Full recomputation keeps one layer's activations instead of all of them: **44.7 GB**, it fits.
The result displays as the answer, its derivation and its assumptions."""),
code("""full = symcalc.solve("total_memory_per_gpu", layout, model="llama3-8b", hardware="h100",
                     options={**fsdp, "recompute": "full"})
full"""),
md("""## 2. Step time from the layout

The step-time model counts the FLOPs, the GEMM and attention rates of the H100, the memory-bound
kernels, and FSDP's all-gathers and reduce-scatters against the compute they hide behind:
**8.744 s** a step. From it, the MFU: **36.5 %**."""),
code("""step = symcalc.solve("step_time", layout, model="llama3-8b", hardware="h100", options={**fsdp, "recompute": "full"})
mfu = symcalc.solve("mfu", {**layout, "step_time": f"{step.value} {step.unit}"}, model="llama3-8b", hardware="h100")
print(f"step_time = {step.value:.4g} {step.unit}, mfu = {mfu.value:.3g} {mfu.unit}")
for part in step.breakdown["parts"]:       # where the time goes
    print(f"  {part['name']:<24} {part['value']:.3g} s")"""),
md("""## 3. Backwards: how many GPUs for a deadline?

15 trillion tokens in 30 days at that MFU. symcalc solves the same equations for `n_gpus`:
**773 GPUs**."""),
code("""need = symcalc.solve("n_gpus", {"n_tokens": "15e12 token", "train_time": "30 day", "mfu": f"{mfu.value} %"},
                     model="llama3-8b", hardware="h100")
print(f"n_gpus = {need.value:.0f}")"""),
md("""## 4. What if: a sweep, and its plot

The training time over 256 to 4,096 GPUs at the same MFU: **90.5 days** on 256, **5.7** on 4,096.
The sweep displays as a table; `.plot()` draws it inline on matplotlib's current figure and returns
it, writing nothing and leaving your backend alone (`.plot("curve.png")` writes a file)."""),
code("""sweep = symcalc.sweep("train_time", {"n_tokens": "15e12 token", "mfu": f"{mfu.value} %"},
                      vary={"n_gpus": "256:4096:5:log"}, model="llama3-8b", hardware="h100")
print([f"{v:.1f}" for v in sweep.values])
sweep"""),
code("""sweep.plot()"""),
md("""## 5. The best layout

`symcalc.plan` searches every layout FSDP runs on 512 GPUs, keeps those that fit and ranks them.
Each row says what validates it: published FSDP runs on H100s, or a hypothesis. The best here:
**tp1 pp1 cp1 dp512 mbs1 zero3 no-recompute**, validated by 37 published FSDP runs on H100s with its choices (no recompute, no sequence parallelism, 1F1B)."""),
code("""plan = symcalc.plan("llama3-8b", "h100", 512, global_batch_size=512, tokens="15e12 token",
                    options={"stack": "fsdp"}, top=3)
print(plan.rows[0].label(), "|", plan.rows[0].verdict["text"])
plan"""),
md("""## 6. Once the cluster exists: calibrate

Measured steps of your own runs fit the model's few physical coefficients (the sustained clock,
the communication contention, the stack's overheads) into a hardware profile, which every
question then takes as `hardware=`. The example runs file holds llm-foundry's H100 FSDP
measurements; `symcalc.calibrate` fits them (as `symcalc calibrate` does) and, given `output=`,
writes the profile."""),
code("""import pathlib
# the example runs file comes with a checkout of the repository (here, or one folder up from docs/)
runs = next((p for p in (pathlib.Path("calibration/examples/h100_fsdp_runs.toml"),
                         pathlib.Path("../calibration/examples/h100_fsdp_runs.toml")) if p.exists()), None)
if runs is None:
    print("calibration/examples/h100_fsdp_runs.toml is not here: run this notebook from a checkout of symcalc")
else:
    cal = symcalc.calibrate(runs, output="h100_fsdp.toml")   # output=: the profile's file, asked for
    print(cal.text().splitlines()[0])
    calibrated = symcalc.solve("step_time", layout, model="llama3-8b", hardware="h100_fsdp.toml",
                               options={**fsdp, "recompute": "full"})
    print(f"step_time with the calibrated profile = {calibrated.value:.4g} {calibrated.unit}")"""),
md("""That is the loop: ask forwards, solve backwards, sweep, plan, and calibrate once real steps
exist. `symcalc --help` has the same questions on the command line."""),
    ]


def notebook():
    """The tutorial as an nbformat notebook, outputs empty, each cell with a stable id (writing
    the notebook again changes only what was edited)."""
    nb = nbf.v4.new_notebook()
    cells = _cells()
    for i, cell in enumerate(cells):
        cell["id"] = f"cell-{i:02d}"
    nb["cells"] = cells
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def main() -> None:
    nbf.write(notebook(), str(NOTEBOOK))


if __name__ == "__main__":
    main()
