"""numba's kernel cache is refreshed when a file a kernel depends on changes (not only its own)."""
import os
import subprocess
import sys
import textwrap

from ibp_graph.jit_cache import STAMP_NAME, cache_dir, cold, refresh, sources_stamp


def _package(tmp_path, value: int):
    pkg = tmp_path / "pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "consts.py").write_text(f"VALUE = {value}\n")
    (pkg / "kernel.py").write_text(textwrap.dedent("""
        import numba
        from .consts import VALUE

        @numba.njit(cache=True)
        def value():
            return VALUE
    """))
    return pkg


def _run(tmp_path, refresh_first: bool) -> int:
    first = "refresh(Path(sys.argv[1]) / 'pkg'); " if refresh_first else ""
    code = ("import sys; from pathlib import Path; from ibp_graph.jit_cache import refresh; " + first +
            "sys.path.insert(0, sys.argv[1]); from pkg.kernel import value; print(value())")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}  # the in-tree cache
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True,
                         text=True, check=True)
    return int(out.stdout.split()[-1])


def test_a_changed_constant_in_another_file_recompiles_the_kernel(tmp_path):
    pkg = _package(tmp_path, 1)
    assert _run(tmp_path, refresh_first=True) == 1
    assert list((pkg / "__pycache__").glob("kernel.value-*.nbc"))  # cached on disk
    st = os.stat(pkg / "consts.py")
    _package(tmp_path, 2)  # kernel.py untouched: numba alone would load the cached VALUE = 1
    os.utime(pkg / "consts.py", ns=(st.st_atime_ns, st.st_mtime_ns + 10 ** 9))
    assert _run(tmp_path, refresh_first=True) == 2


def test_refresh_clears_only_when_the_sources_changed(tmp_path):
    pkg = _package(tmp_path, 1)
    folder = cache_dir(pkg / "kernel.py")
    assert folder == pkg / "__pycache__"
    folder.mkdir(exist_ok=True)
    (folder / "kernel.value-5.py311.nbi").write_bytes(b"x")
    assert refresh(pkg) == [folder]  # no stamp yet: whatever is cached may be stale
    assert not list(folder.glob("*.nbi")) and (folder / STAMP_NAME).read_text() == sources_stamp(pkg)
    (folder / "kernel.value-5.py311.nbi").write_bytes(b"x")
    assert refresh(pkg) == [] and list(folder.glob("*.nbi"))  # current: kept
    (pkg / "consts.py").write_text("VALUE = 22\n")
    assert refresh(pkg) == [folder] and not list(folder.glob("*.nbi"))



def test_cold_says_whether_the_kernels_will_be_compiled(tmp_path):
    pkg = _package(tmp_path, 1)
    assert cold(pkg)  # nothing cached
    assert _run(tmp_path, refresh_first=True) == 1
    assert not cold(pkg)  # compiled once: loaded from now on
    (pkg / "consts.py").write_text("VALUE = 3\n")
    assert cold(pkg)  # the sources changed: the stale kernels are cleared and compile again

# One process per "environment": numba's version as argv[1] (a fake one stands for the other
# environment's numba), then whether the package's kernel came from the cache.
_ENV_PROBE = """
import sys, numba
numba.__version__ = sys.argv[1]
import numpy as np
from ibp_graph.layout import rows
k = rows._gather_fixed[1]
src = np.arange(64, dtype=np.uint64).reshape(8, 8)
out = np.empty((2, 8), np.uint64)
k(src, np.array([5, 1]), out)
assert (out == src[[5, 1]]).all()
print(bool(k.stats.cache_hits))
"""


def _cached_in(version: str, cache_root) -> bool:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache_root)}
    out = subprocess.run([sys.executable, "-c", _ENV_PROBE, version], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.split()[-1] == "True"


def test_two_environments_keep_their_own_cache_entries(tmp_path):
    """Switching between two numba versions on one source tree compiles each kernel once per
    environment (before: each switch overwrote the other's index, and everything recompiled)."""
    import numba

    ours, other = numba.__version__, numba.__version__ + ".other"
    assert not _cached_in(ours, tmp_path)  # first build in each environment
    assert not _cached_in(other, tmp_path)
    assert _cached_in(ours, tmp_path) and _cached_in(other, tmp_path)  # both still valid
    folders = {p.parent.name for p in tmp_path.rglob("rows._gather_fixed_impl_serial-*.nbi")}
    assert len(folders) == 2 and all(f.startswith("ibp_graph-numba") for f in folders)


def test_the_locator_answers_for_the_package_only(tmp_path):
    """The package's files are cached in this environment's subfolder; any other file where
    numba would put it (the user's functions are not moved)."""
    from ibp_graph.jit_cache import PACKAGE_DIR, environment_tag

    assert cache_dir(PACKAGE_DIR / "layout" / "rows.py") == \
        PACKAGE_DIR / "layout" / "__pycache__" / environment_tag()
    pkg = _package(tmp_path, 1)
    assert cache_dir(pkg / "kernel.py") == pkg / "__pycache__"


def test_every_module_with_cached_kernels_installs_the_locator_before_decorating_them():
    """A module whose cache=True kernels were decorated before the locator is installed would cache
    them in numba's shared folder again (the locator is chosen at decoration)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "ibp_graph"
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "jit_cache.py":
            continue
        tree = ast.parse(path.read_text())
        first_cached = installed = None
        for node in tree.body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
                    getattr(node.value.func, "id", "") == "_install_kernel_cache" and installed is None:
                installed = node.lineno
            for inner in ast.walk(node):
                if isinstance(inner, ast.keyword) and inner.arg == "cache" and \
                        getattr(inner.value, "value", None) is True and first_cached is None:
                    first_cached = inner.lineno
        if first_cached is not None:
            found.append(path.name)
            assert installed is not None and installed < first_cached, path
    assert len(found) >= 10  # the codec, layout, data, sampling and index-check kernels
