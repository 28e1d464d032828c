"""numba's kernel cache is refreshed when a file a kernel depends on changes (not only its own)."""
import os
import subprocess
import sys
import textwrap

from ibp_graph.jit_cache import STAMP_NAME, cache_dir, refresh, sources_stamp


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
