"""The package's import graph keeps its layers (docs/architecture.md): no import circle, and no
import from a lower layer to a higher one, counting imports made inside functions too.

    front-ends (loaders)  ->  pipeline  ->  data / gpu  ->  codec / sampling  ->  layout
    train, cli, benchmarks sit on top; threads and tables are utilities at the bottom.

The graph is read from the source with `ast` (nothing is imported), so an import that only
runs on a GPU machine or in a worker counts as well.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: where each part of the package lives (pyproject.toml maps loaders/ and kernels/ in)
SOURCES = {"ibp_graph": ROOT / "ibp_graph", "ibp_graph.loaders": ROOT / "loaders",
           "ibp_graph.kernels": ROOT / "kernels"}
#: layer of each module prefix; the longest matching prefix wins. A module may import its own
#: layer or lower ones only.
LAYERS = {
    "ibp_graph.layout": 0, "ibp_graph.threads": 0, "ibp_graph.tables": 0, "ibp_graph.files": 0,
    "ibp_graph.index_checks": 0, "ibp_graph.kernels": 0, "ibp_graph.jit_cache": 0, "ibp_graph.resources": 0,
    "ibp_graph.codec": 1, "ibp_graph.sampling": 1,
    "ibp_graph.gpu": 2, "ibp_graph.data": 2,
    "ibp_graph.pipeline": 3,
    "ibp_graph.loaders": 4,
    "ibp_graph.train": 5, "ibp_graph.benchmarks": 5, "ibp_graph.cli": 5, "ibp_graph": 5,
}
#: same-layer imports that are still forbidden (importer prefix, imported prefix)
FORBIDDEN = [("ibp_graph.codec", "ibp_graph.gpu"), ("ibp_graph.codec", "ibp_graph.data"),
             ("ibp_graph.sampling", "ibp_graph.codec"), ("ibp_graph.data", "ibp_graph.gpu"),
             ("ibp_graph.gpu", "ibp_graph.data")]


def _modules() -> dict[str, Path]:
    found = {}
    for pkg, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([pkg, *parts]) if parts else pkg
            if pkg == "ibp_graph" and parts and parts[0] in ("loaders", "kernels"):
                continue  # links made by gpu_check.sh when it runs from a checkout
            found[name] = path
    return found


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _resolve(name: str, target: str) -> str:
    """The module an import names: the target itself, or the longest known module above it."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target


def imports_of(name: str) -> set[str]:
    """Every ibp_graph module `name` imports, at any depth of its source."""
    tree = ast.parse(MODULES[name].read_text(), filename=str(MODULES[name]))
    base = name if _is_package(name) else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                mod = ".".join(anchor + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from pkg import sub` imports the submodule; `from mod import name`, the module
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names]
        else:
            continue
        for t in targets:
            if t == "ibp_graph" or t.startswith("ibp_graph."):
                r = _resolve(name, t)
                if r and r != name:
                    out.add(r)
    return out


GRAPH = {m: imports_of(m) for m in MODULES}


def layer(name: str) -> int:
    best = max((p for p in LAYERS if name == p or name.startswith(p + ".")), key=len, default=None)
    if best is None:
        raise AssertionError(f"module {name} has no layer: add its prefix to LAYERS in {__file__}")
    return LAYERS[best]


def test_every_module_has_a_layer():
    for m in MODULES:
        layer(m)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_import_reaches_a_higher_layer(name):
    bad = []
    for dep in sorted(GRAPH[name]):
        if layer(dep) > layer(name):
            bad.append(f"{dep} (layer {layer(dep)})")
        for a, b in FORBIDDEN:
            if (name == a or name.startswith(a + ".")) and (dep == b or dep.startswith(b + ".")):
                bad.append(f"{dep} ({a} must not import {b})")
    assert not bad, f"{name} (layer {layer(name)}) imports {', '.join(bad)}"


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), ignoring a package's
    imports of its own submodules' parents (an __init__ re-exporting its children is fine)."""
    edges = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in GRAPH.items()}
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle():
    cycles = _cycles()
    assert not cycles, "import circles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_walker_sees_function_level_imports(tmp_path, monkeypatch):
    """A circle hidden in a function-level import is found (the check can fail)."""
    src = {"ibp_graph.codec.base": "def f():\n    from .format import x\n",
           "ibp_graph.codec.format": "from .base import y\n"}
    for mod, text in src.items():
        path = tmp_path / (mod.replace(".", "_") + ".py")
        path.write_text(text)
        monkeypatch.setitem(MODULES, mod, path)
    graph = {m: imports_of(m) for m in src}
    assert "ibp_graph.codec.format" in graph["ibp_graph.codec.base"]
    assert "ibp_graph.codec.base" in graph["ibp_graph.codec.format"]


#: the one module that produces batches (issue #20: one data path for every front-end).
PRODUCER = "ibp_graph.pipeline.producer"


def _producing(tree: ast.AST) -> list[str]:
    """What makes a module a batch producer: a Dataset class, a call of encode_group, an EncodedBatch built."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
            found += [f"class {node.name}({b})" for b in bases if b == "Dataset"]
        elif isinstance(node, ast.Call):
            f = node.func
            called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if called in ("encode_group", "EncodedBatch"):
                found.append(f"{called}(...) at line {node.lineno}")
    return found


def producers(modules) -> dict[str, list[str]]:
    """The modules of the pipeline and the front-ends that produce batches, and why."""
    out = {}
    for name in modules:
        if layer(name) in (3, 4):
            found = _producing(ast.parse(MODULES[name].read_text(), filename=str(MODULES[name])))
            if found:
                out[name] = found
    return out


def test_one_module_produces_batches():
    """Every front-end builds its batches with pipeline/producer.py: no second producer."""
    found = producers(MODULES)
    assert list(found) == [PRODUCER], f"batch producers outside {PRODUCER}: " + "; ".join(
        f"{m}: {', '.join(why)}" for m, why in found.items() if m != PRODUCER)


def _kernel_names(module: str) -> set[str]:
    """A sampling module's kernels: its private names (``_``-prefixed) and numba-compiled functions."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            src = [ast.unparse(d) for d in node.decorator_list]
            if node.name.startswith("_") or any("jit" in d or "vectorize" in d for d in src):
                names.add(node.name)
    return names


def kernel_uses(name: str) -> list[str]:
    """The sampling kernels module `name` reaches directly (imported by name, or as an attribute of the
    sampling module imported), with their lines."""
    tree = ast.parse(MODULES[name].read_text(), filename=str(MODULES[name]))
    aliases, bad = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ibp_graph.sampling"):
            for a in node.names:
                target = _resolve(name, f"{node.module}.{a.name}")
                if target == f"{node.module}.{a.name}":  # a submodule
                    aliases[a.asname or a.name] = target
                elif a.name.startswith("_") or a.name in _kernel_names(target):
                    bad.append(f"{node.module}.{a.name} (line {node.lineno})")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("ibp_graph.sampling") and a.asname:
                    aliases[a.asname] = _resolve(name, a.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            module = aliases[node.value.id]
            if module in MODULES and (node.attr.startswith("_") or node.attr in _kernel_names(module)):
                bad.append(f"{module}.{node.attr} (line {node.lineno})")
    return bad


@pytest.mark.parametrize("name", sorted(m for m in MODULES if layer(m) == 4))
def test_front_ends_use_no_sampling_kernels(name):
    """A front-end reaches the samplers through their public classes, never their kernels."""
    bad = kernel_uses(name)
    assert not bad, f"{name} uses sampling kernels directly: {', '.join(bad)}"


def test_the_checks_see_a_second_producer_and_a_kernel_import(tmp_path, monkeypatch):
    """A second producer (a Dataset, an encode_group call) and a front-end's kernel imports are found."""
    src = {"ibp_graph.loaders.fake": (
        "import torch\nfrom ibp_graph.sampling.neighbor import _sample_range, NeighborSampler\n"
        "import ibp_graph.sampling.hetero as h\n"
        "class P(torch.utils.data.Dataset):\n    def f(self):\n        return encode_group(1, 2, 3, 4)\n"
        "def g():\n    return h._induced_edges\n")}
    for mod, text in src.items():
        path = tmp_path / "fake.py"
        path.write_text(text)
        monkeypatch.setitem(MODULES, mod, path)
    found = producers(MODULES)
    assert found["ibp_graph.loaders.fake"] == ["class P(Dataset)", "encode_group(...) at line 6"]
    assert kernel_uses("ibp_graph.loaders.fake") == ["ibp_graph.sampling.neighbor._sample_range (line 2)",
                                                     "ibp_graph.sampling.hetero._induced_edges (line 8)"]
