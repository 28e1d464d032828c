"""Every script in scripts/ imports only what the library has (a module moved once left one failing on import)."""
import ast
import importlib
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "scripts").glob("*.py"))
OURS = ("ibp_graph", "loaders")


def _our_imports(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(module, names) of each import of the project's own modules in `path` (names: () for `import M`)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] in OURS:
            out.append((node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            out.extend((a.name, ()) for a in node.names if a.name.split(".")[0] in OURS)
    return out


def test_there_are_scripts_importing_the_library():
    assert len(SCRIPTS) >= 8 and all(_our_imports(p) for p in SCRIPTS if p.name.startswith("bench_"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_scripts_imports_of_the_library_exist(script):
    for module, names in _our_imports(script):
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            if "dgl" in str(e).lower():  # a DGL-only module, in an environment without DGL
                continue
            raise AssertionError(f"{script.name}: import {module} fails: {e}") from None
        missing = [n for n in names if not hasattr(mod, n) and not _submodule(module, n)]
        assert not missing, f"{script.name}: {module} has no {missing}"


def _submodule(module: str, name: str) -> bool:
    try:
        importlib.import_module(f"{module}.{name}")
        return True
    except ImportError:
        return False
