"""The folder layout is the architecture: text -> library -> engine -> query -> render -> commands.

Every import between symcalc's modules (those inside functions included) is read from the
source with ``ast``. The tests assert that no module imports, directly or through others, a
module that imports it back (no cycles); that each import goes down the layers or stays within
one, except the few listed with their reason; and that an import inside a function says why on
its line or the line above (start-up time, an optional dependency), since the default is the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from symcalc.engine.structure import strongly_connected_components

PACKAGE = Path(__file__).resolve().parent.parent / "symcalc"

# lowest first: a module may import from its own layer and the layers before it
LAYERS = [
    ("support", {"errors", "findings", "budget", "cache", "outfile", "escape", "lazy", "compiled", "formats"}),
    ("units", {"units"}),
    ("library", {"library"}),
    ("engine", {"engine"}),
    ("query", {"query"}),
    ("planner", {"planner"}),
    ("render", {"render"}),
    ("serve", {"serve"}),
    ("commands", {"cli", "commands", "examples", "__init__", "__main__"}),
]

# (importer, imported): why the arrow may point up. None since issue 35: the records reached the
# renderers through symcalc.render.formats, which imports nothing of symcalc and now sits in the
# support layer (symcalc.formats), so records in any layer name a format without an upward import
UPWARD: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}


def layer_of(module: str) -> int:
    parts = module.split(".")
    key = parts[1] if len(parts) > 1 else "__init__"
    for i, (_, names) in enumerate(LAYERS):
        if key in names:
            return i
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


ENDS: dict[str, dict[int, int]] = {}     # module -> first line of an import -> its last line


def imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported symcalc module, line, inside a function) for every import in ``module``."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    ends = ENDS.setdefault(module, {})

    def visit(node, in_function: bool):
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                ends[child.lineno] = child.end_lineno
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("symcalc"):
                        found.append((_existing(alias.name), child.lineno, in_function))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    parts = parts[:len(parts) - (child.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                if not base.startswith("symcalc"):
                    continue
                for alias in child.names:
                    full = f"{base}.{alias.name}"
                    found.append((full if full in MODULES else _existing(base), child.lineno, in_function))
            if not isinstance(child, (ast.Import, ast.ImportFrom)):
                visit(child, inner)

    visit(tree, False)
    # TYPE_CHECKING blocks are read by type checkers only
    checking = _type_checking_lines(tree)
    return [(m, line, fn) for m, line, fn in found if line not in checking and m != module]


def _existing(name: str) -> str:
    while name not in MODULES and "." in name:
        name = name.rpartition(".")[0]
    return name


def _type_checking_lines(tree) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for inner in ast.walk(node):
                if hasattr(inner, "lineno"):
                    lines.add(inner.lineno)
    return lines


GRAPH = {m: sorted({i for i, _, _ in imports(m) if i in MODULES and i != "symcalc"}) for m in MODULES}


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_the_format_registry_imports_nothing_of_symcalc():
    # it sits in the support layer so that records of every layer (query's Result, the planner's
    # PlanResult) reach the renderers through it; importing a module of symcalc would undo that
    assert GRAPH["symcalc.formats"] == []


def test_no_import_cycles_not_even_inside_functions():
    # any strongly connected component of more than one module is a cycle
    cycles = [c for c in strongly_connected_components(GRAPH) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"


def test_imports_go_down_the_layers():
    upward = [(m, i) for m, deps in GRAPH.items() for i in deps
              if i != "symcalc" and layer_of(i) > layer_of(m) and (m, i) not in UPWARD]
    assert not upward, "imports up the layers (add a reason to UPWARD or move the code): " + \
        ", ".join(f"{m} -> {i}" for m, i in upward)


def test_listed_exceptions_are_still_needed():
    for m, i in UPWARD:
        assert i in GRAPH.get(m, []), f"{m} no longer imports {i}: drop it from UPWARD"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_inside_functions_say_why(module):
    lines = MODULES[module].read_text(encoding="utf-8").splitlines()
    silent = []
    for _, line, in_function in imports(module):
        if not in_function:
            continue
        statement = lines[line - 1:ENDS[module].get(line, line)]
        above = lines[line - 2] if line > 1 else ""
        if not any("#" in x for x in statement) and not above.strip().startswith("#"):
            silent.append(f"line {line}: {statement[0].strip()}")
    assert not silent, f"{module}: imports inside functions without a reason: {silent}"


# modules that import the package root itself (``from symcalc import ...``), each with its reason:
# the root binds the public names lazily, so importing it from below is importing from above
ROOT_IMPORTS: dict[str, str] = {}


def test_imports_of_the_package_root_are_counted():
    importers = {m for m in MODULES for i, _, _ in imports(m) if i == "symcalc" and m != "symcalc"}
    assert importers == set(ROOT_IMPORTS), (
        f"modules importing the package root: {sorted(importers)}; expected {sorted(ROOT_IMPORTS)} "
        "(import the module that defines the name instead)")


def test_the_format_registry_names_real_renderers_in_the_render_layer():
    """The renderers are imported by their string keys (symcalc.formats.FORMATS,
    "module:function"): imports the ast cannot see, so each is checked here: the module exists,
    sits in the render layer, and has the function."""
    import importlib

    from symcalc.formats import FORMATS
    render = [i for i, (name, _) in enumerate(LAYERS) if name == "render"][0]
    assert len(FORMATS) >= 10
    for key, spec in FORMATS.items():
        module, _, function = spec.partition(":")
        assert module in MODULES, f"format {key}: no module {module}"
        assert layer_of(module) == render, f"format {key}: {module} is not in the render layer"
        assert callable(getattr(importlib.import_module(module), function, None)), f"format {key}: no {spec}"


MAX_FUNCTION_LINES = 80


def test_no_function_is_longer_than_80_lines():
    # a function that long does several jobs (issue 24): split it where the logic allows
    long = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


MAX_MODULE_LINES = 500


def test_no_module_is_longer_than_500_lines():
    # a module that long holds several jobs (issue 35): split it by job, one module each
    long = [f"{module}: {n} lines" for module, path in MODULES.items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
