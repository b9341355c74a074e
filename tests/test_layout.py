"""The package's layout holds: each layer imports only the layers below it, no module imports itself back through
others (imports inside functions included), the top level stays small, functions stay short, and the engine names
no zoo model.

The layers, lowest first (README, "Layout"): ``data`` < ``storage`` < ``nn`` < ``inference.compile`` <
``inference`` < ``posterior`` < the faces (``registry``, ``result``, ``prepare``, ``fit``, ``store``, ``cli``,
``workflows``, ``bench``) < ``models`` < the package itself (``pyro_bdl/__init__``, which imports the zoo last).  The graph is read from the
source (``ast``), so an import hidden in a function counts as much as one at the top of a module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pyro_bdl"

#: module-name prefix -> layer (the longest matching prefix decides)
LAYERS = {
    "pyro_bdl.data": 0,
    "pyro_bdl.storage": 1,
    "pyro_bdl.nn": 2,
    "pyro_bdl.inference.compile": 3,
    "pyro_bdl.inference": 4,
    "pyro_bdl.posterior": 5,
    "pyro_bdl.registry": 6, "pyro_bdl.result": 6, "pyro_bdl.prepare": 6, "pyro_bdl.fit": 6, "pyro_bdl.store": 6, "pyro_bdl.cli": 6,
    "pyro_bdl.workflows": 6,  # faces too: what a user does with fits (active learning, evidence, SBC), on fit
    "pyro_bdl.bench": 6,  # faces too: the benchmarks' protocols (``pyro-bdl bench``) and the studies they share
    "pyro_bdl.models": 7,
    "pyro_bdl": 8,
}
LAYER_NAMES = ["data", "storage", "nn", "inference.compile", "inference", "posterior", "faces", "models",
               "the package"]


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the package's modules it imports (anywhere in its body), read from the source under ``root``.
    ``from a.b import c`` counts as an import of ``a.b.c`` where that is a module, else of ``a.b``; relative
    imports are resolved against the importing module."""
    paths = {module_name(p, root): p for p in root.rglob("*.py")}
    top = root.name
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base for alias in node.names]
            else:
                continue
            edges.update(t for t in targets if t == top or t.startswith(top + "."))
        graph[name] = {t for t in edges if t != name}
    return graph


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a higher layer by a lower one, as readable lines."""
    return sorted(f"{a} ({LAYER_NAMES[layer(a)]}) imports {b} ({LAYER_NAMES[layer(b)]})"
                  for a, targets in graph.items() for b in targets if layer(b) > layer(a))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_each_layer_imports_only_lower_layers():
    assert upward_imports(import_graph()) == []


def test_the_checks_see_what_they_exist_to_see(tmp_path):
    """The graph reader finds an import hidden in a function, a relative import and a cycle through it; the layer
    check flags data importing inference (as ``data.py`` <-> ``validate.py`` and ``datasets`` -> ``uncertainty``
    did before the layout of issue 30)."""
    root = tmp_path / "pyro_bdl"
    (root / "data").mkdir(parents=True)
    (root / "inference").mkdir()
    (root / "__init__.py").write_text("")
    (root / "data" / "__init__.py").write_text("")
    (root / "inference" / "__init__.py").write_text("")
    (root / "data" / "table.py").write_text("def load():\n    from pyro_bdl.data.checks import check\n")
    (root / "data" / "checks.py").write_text("from .table import load\nfrom pyro_bdl.inference import base\n")
    (root / "inference" / "base.py").write_text("")
    graph = import_graph(root)
    assert graph["pyro_bdl.data.table"] == {"pyro_bdl.data.checks"}
    assert graph["pyro_bdl.data.checks"] == {"pyro_bdl.data.table", "pyro_bdl.inference.base"}
    assert cycles(graph) == [["pyro_bdl.data.checks", "pyro_bdl.data.table"]]
    assert upward_imports(graph) == ["pyro_bdl.data.checks (data) imports pyro_bdl.inference.base (inference)"]


def test_top_level_is_the_faces():
    modules = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert len(modules) <= 10, modules
    assert set(modules) <= {"cli", "fit", "prepare", "registry", "result", "store"}, modules


#: The most lines a function of the package may have, docstring included (issue 30).
MAX_FUNCTION_LINES = 90


def test_no_long_function():
    """No function of the package runs over MAX_FUNCTION_LINES lines."""
    limit = MAX_FUNCTION_LINES
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit:
                long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} "
                            f"({node.end_lineno - node.lineno + 1} lines)")
    assert long == []


def _strings_outside_docstrings(tree: ast.AST):
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node


#: Strings outside the zoo that are spelt like a model but name something else: (module, string) -> what it is.
NOT_A_MODEL = {
    ("data/embedded.py", "coin"): "the embedded data set of 30 tosses (`--data coin`), which any model may take, and "
                                  "the word in its description",
    ("inference/laplace.py", "last-layer"): "a value of laplace-ggn's `subset` setting (laplace-torch's "
                                            "subset_of_weights): the network's last layer",
}


def test_engine_names_no_zoo_model():
    """Outside ``pyro_bdl/models/`` and ``pyro_bdl/bench/`` (a benchmark protocol names the model it measures) no
    string of the code (docstrings aside; messages and options included) is a zoo model's name, alone or as a word of
    a message: the engine asks a model for what it declares, and a study takes its model as an argument.
    The strings spelt like a model that mean something else are listed, with what they are, in NOT_A_MODEL."""
    import pyro_bdl

    names = sorted((spec.name for spec in pyro_bdl.list_models()), key=len, reverse=True)
    word = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, names)) + r")(?![\w-])")  # a name within a message too
    found = []
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE)
        if where.parts[0] in ("models", "bench"):
            continue
        for node in _strings_outside_docstrings(ast.parse(path.read_text())):
            for name in word.findall(node.value):
                if (where.as_posix(), name) not in NOT_A_MODEL:
                    found.append(f"{where}:{node.lineno} {name!r} in {node.value[:80]!r}")
    assert found == []


def test_compile_knows_no_pyro():
    """``inference/compile`` (the speed machinery) knows ``torch.fx`` and nothing of Pyro or of the sampler: none of
    its modules imports ``pyro`` or a module of the package outside ``pyro_bdl.inference.compile`` (imports inside
    functions included)."""
    inside = "pyro_bdl.inference.compile"
    found = []
    for path in (PACKAGE / "inference" / "compile").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from this package (level 1) or one above it
                    targets = [inside if node.level == 1 else f"pyro_bdl.inference (relative, level {node.level})"]
                else:
                    targets = [node.module or ""]
            else:
                continue
            for target in targets:
                top = target.split(".")[0]
                if top == "pyro" or (top == "pyro_bdl" and target != inside and not target.startswith(inside + ".")):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} imports {target}")
    assert found == []


def test_the_package_and_the_listing_load_no_plotting_arviz_or_sampler_machinery():
    """``import pyro_bdl``, ``pyro-bdl list`` and ``pyro-bdl describe`` leave ArviZ, matplotlib, scipy.stats and the
    sampler's machinery unimported (they cost seconds; a fit that needs them imports them)."""
    import subprocess
    import sys

    heavy = ["arviz", "matplotlib", "scipy.stats", "xarray", "pyro_bdl.inference.compile.aten_trace",
             "pyro_bdl.inference.mcmc.sampler"]
    code = ("import sys, io, contextlib, pyro_bdl, pyro_bdl.cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    pyro_bdl.cli.main(['list'])\n"
            "    pyro_bdl.cli.main(['describe', 'bnn-regressor'])\n"
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
