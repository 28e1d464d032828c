"""pyproject.toml lists every package of the source tree, so a wheel (non-editable install, as on
a GPU machine) carries every module the editable install finds."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.test_layers import SOURCES

tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")


def _packages_on_disk() -> set[str]:
    found = set()
    for prefix, root in SOURCES.items():
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root).parts
            if "__pycache__" not in rel:
                found.add(".".join((prefix, *rel)))
    return found


def test_every_package_is_listed_for_the_wheel():
    config = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    on_disk = _packages_on_disk()
    assert on_disk - listed == set(), "packages missing from pyproject.toml [tool.setuptools] packages"
    assert listed - on_disk == set(), "pyproject.toml lists packages that do not exist"


def test_every_dgl_marked_test_file_runs_in_make_test_dgl():
    """`make test` deselects the dgl-marked tests and `make test-dgl` runs only the files Makefile's DGL_TESTS
    lists, so a dgl-marked file missing there would never run in CI."""
    root = Path(__file__).resolve().parents[1]
    line = next(x for x in (root / "Makefile").read_text().splitlines() if x.startswith("DGL_TESTS"))
    listed = set(line.split("=", 1)[1].split())
    marked = {p.relative_to(root).as_posix() for p in (root / "tests").rglob("test_*.py")
              if p != Path(__file__).resolve() and "pytest.mark.dgl" in p.read_text()}
    assert marked, "no dgl-marked test file found: the marker's spelling changed?"
    assert marked - listed == set(), "dgl-marked test files missing from Makefile's DGL_TESTS"
    assert {p for p in listed if not (root / p).is_file()} == set(), "DGL_TESTS lists files that do not exist"
