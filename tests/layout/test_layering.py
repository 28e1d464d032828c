"""The layout is the bottom layer and the codecs sit on it: read every import statement of both
packages (function-level ones included) and check where they point, and that they form no circle."""
from __future__ import annotations

import ast
from pathlib import Path

import ibp_graph

ROOT = Path(ibp_graph.__file__).parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[str, int]]:
    """(absolute module, line) of every import in the file, at any depth; `from p import m`
    counts as an import of p.m when p/m is a module."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for a in node.names:
                sub = target + "." + a.name
                is_module = (ROOT.parent / Path(*sub.split("."))).with_suffix(".py").exists() or \
                    (ROOT.parent / Path(*sub.split("."))).is_dir()
                out.append((sub if is_module else target, node.lineno))
    return out


def graph(*packages: str) -> dict[str, list[tuple[str, int]]]:
    return {module_name(p): imports_of(p) for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py"))}


def test_layout_imports_no_codec_and_nothing_above_it():
    for mod, deps in graph("layout").items():
        for dep, line in deps:
            if dep.startswith("ibp_graph"):
                assert dep.startswith(("ibp_graph.layout", "ibp_graph.threads")), (mod, line, dep)


def test_codec_imports_only_itself_and_the_layout():
    for mod, deps in graph("codec").items():
        for dep, line in deps:
            if dep.startswith("ibp_graph"):
                assert dep.startswith(("ibp_graph.codec", "ibp_graph.layout", "ibp_graph.threads")), \
                    (mod, line, dep)


def test_no_import_circle_in_codec_and_layout():
    g = {m: sorted({d for d, _ in deps if d.startswith("ibp_graph.")}) for m, deps in
         graph("codec", "layout").items()}
    state: dict[str, int] = {}

    def visit(m, path):
        if state.get(m) == 1:
            raise AssertionError("import circle: " + " -> ".join(path + [m]))
        if state.get(m) == 2 or m not in g:
            return
        state[m] = 1
        for d in g[m]:
            if d != m and not m.startswith(d + "."):  # a module's own package is loaded first anyway
                visit(d, path + [m])
        state[m] = 2

    for m in g:
        visit(m, [])
