"""What one host of a sharded run holds of a prepared folder: everything but its raw feature tables (x.npy,
nodes/<type>/x.npy) and its pre-encoded stores (store/, nodes/<type>/store/), hard-linked (copied where the file
system cannot link)."""
import os
import shutil
from pathlib import Path


def is_host_file(relative: Path) -> bool:
    """Whether a host of a sharded run needs the file `relative` (a path inside the prepared folder)."""
    return relative.name != "x.npy" and "store" not in relative.parts


def sharded_host_copy(prepared: Path, dest: Path) -> Path:
    """`dest`: a copy of the prepared folder `prepared` with only what a host of a sharded run needs (its shards
    folders included); returns it."""
    for path in sorted(prepared.rglob("*")):
        rel = path.relative_to(prepared)
        if path.is_dir() or not is_host_file(rel):
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, dest / rel)
        except OSError:
            shutil.copy2(path, dest / rel)
    assert not list(dest.rglob("x.npy")) and not list(dest.rglob("store"))
    return dest
