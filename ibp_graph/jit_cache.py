"""numba's on-disk kernel cache, kept valid when a kernel's dependencies in other files change.

numba compiles each ``cache=True`` kernel once per machine and keys the cached machine code
by the kernel's own source file (its modification time and size) only. A kernel that inlines
a helper or reads a constant from another module therefore keeps stale code when only that
other module changes. :func:`refresh` closes the gap for this package: it stamps numba's
cache folders of the package with the state of all its sources (path, size and modification
time of every ``.py`` file) and, when the stamp differs, deletes the package's cached kernels
there, so each compiles again once. Loaders call it when they start, before their first
kernel (``loaders/_common.start``); nothing runs on import.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

#: the stamp file written into each cache folder of the package.
STAMP_NAME = "ibp_graph-sources.stamp"
#: the package's source folder.
PACKAGE_DIR = Path(__file__).resolve().parent


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
    """Where numba caches the kernels of `py_file` (its own choice of locator), or None."""
    from numba.core.caching import CacheImpl

    for cls in CacheImpl._locator_classes:
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
