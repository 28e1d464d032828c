"""numba's on-disk kernel cache: one folder per environment, kept valid when a kernel's
dependencies in other files change.

numba keeps one index file per kernel and discards it when another numba version wrote it,
so two environments sharing a source tree (``.venv`` and ``.venv-dgl``) recompiled every
kernel after each switch. :class:`EnvironmentLocator` puts the cache of the package's own
files in a subfolder of numba's usual folder (next to the sources, or under
``NUMBA_CACHE_DIR``) named by :func:`environment_tag`: numba's and Python's versions and a
digest of the interpreter's prefix. ``import ibp_graph`` calls :func:`install` once, the
package's one start-up side effect: it puts the locator first in numba's locator list
(``numba.core.caching.CacheImpl._locator_classes``) so that the package's ``cache=True``
kernels find it when they are decorated. It answers for files under the package folder only;
the user's functions keep numba's folders, and ``NUMBA_CACHE_LOCATOR_CLASSES`` still wins.

numba compiles each ``cache=True`` kernel once per machine and keys the cached machine code
by the kernel's own source file only. A kernel that inlines
a helper or reads a constant from another module therefore keeps stale code when only that
other module changes. :func:`refresh` closes the gap for this package: it stamps the
cache folders of the package with the state of all its sources (path, size and modification
time of every ``.py`` file) and, when the stamp differs, deletes the package's cached kernels
there, so each compiles again once. Loaders call it when they start, before their first
kernel (``loaders/_common.start``).
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Optional

import numba
from numba.core.caching import CacheImpl, _CacheLocator

__all__ = ["STAMP_NAME", "PACKAGE_DIR", "EnvironmentLocator", "install", "environment_tag", "cache_dir",
           "refresh", "sources_stamp", "cold"]

#: the stamp file written into each cache folder of the package.
STAMP_NAME = "ibp_graph-sources.stamp"
#: the package's source folder.
PACKAGE_DIR = Path(__file__).resolve().parent


def environment_tag() -> str:
    """The name of this environment's kernel cache folder: numba and Python versions, prefix digest."""
    digest = hashlib.sha1(f"{sys.prefix}\0{sys.version}\0{numba.__version__}".encode()).hexdigest()[:10]
    return f"ibp_graph-numba{numba.__version__}-{sys.implementation.cache_tag}-{digest}"


def _in_package(py_file: str) -> bool:
    return Path(py_file).resolve().is_relative_to(PACKAGE_DIR)


class EnvironmentLocator(_CacheLocator):
    """numba's cache folder for one of the package's files, with a subfolder per environment."""

    def __init__(self, inner: _CacheLocator):
        self._inner = inner
        self._path = os.path.join(inner.get_cache_path(), environment_tag())

    def get_cache_path(self):
        return self._path

    def get_source_stamp(self):
        return self._inner.get_source_stamp()

    def get_disambiguator(self):
        return self._inner.get_disambiguator()

    @classmethod
    def from_function(cls, py_func, py_file):
        """The locator for a kernel in `py_file`: None outside the package (numba's own choice applies)."""
        if not _in_package(py_file):
            return None
        for base in CacheImpl._locator_classes:  # numba's own choice, read when asked
            if base is cls:
                continue
            inner = base.from_function(py_func, py_file)
            if inner is None:
                continue
            self = cls(inner)
            try:
                self.ensure_cache_path()
            except OSError:  # the subfolder cannot be made: try numba's next folder
                continue
            return self
        return None


def install() -> bool:
    """Put EnvironmentLocator first in numba's locator list (once); True when this call added it."""
    if EnvironmentLocator in CacheImpl._locator_classes:
        return False
    CacheImpl._locator_classes.insert(0, EnvironmentLocator)
    return True


def _sources(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def sources_stamp(root: Path = PACKAGE_DIR) -> str:
    """A digest of every ``.py`` file under `root`: relative path, size, modification time."""
    h = hashlib.sha1()
    for p in _sources(root):
        st = p.stat()
        h.update(f"{p.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _anchor() -> None:  # stands in for a kernel when asking numba's locators for a file's folder
    return None


def cache_dir(py_file: Path) -> Optional[Path]:
    """Where the kernels of `py_file` are cached (this environment's folder for the package's
    files, numba's own choice for other files), or None."""
    install()  # the package's kernels are decorated after it; the answer must be theirs
    for cls in CacheImpl._locator_classes:  # EnvironmentLocator first
        locator = cls.from_function(_anchor, str(py_file))
        if locator is not None:
            return Path(locator.get_cache_path())
    return None


def refresh(root: Path = PACKAGE_DIR) -> list[Path]:
    """Delete the package's cached kernels wherever they were compiled from other sources than
    today's; returns the cache folders cleared (empty when the cache is current)."""
    stamp = sources_stamp(root)
    folders = {cache_dir(p) for p in _sources(root)} - {None}
    cleared = []
    for folder in sorted(folders):
        mark = folder / STAMP_NAME
        try:
            if mark.is_file() and mark.read_text() == stamp:
                continue
            stale = [*folder.glob("*.nbi"), *folder.glob("*.nbc")] if folder.is_dir() else []
            for f in stale:
                f.unlink(missing_ok=True)
            folder.mkdir(parents=True, exist_ok=True)
            mark.write_text(stamp)
        except OSError:  # a read-only install: numba falls back to its own folders there
            continue
        if stale:
            cleared.append(folder)
    return cleared


def cold(root: Path = PACKAGE_DIR) -> bool:
    """Whether the package's kernels will be compiled rather than loaded (after `refresh`, which clears
    stale ones): none of its cache folders holds a cached kernel. The first run in an environment, or
    after its sources changed, compiles for about a minute on 2 cores: a command says so first."""
    refresh(root)
    folders = {cache_dir(p) for p in _sources(root)} - {None}
    return not any(next(f.glob("*.nbi"), None) is not None for f in folders if f.is_dir())
