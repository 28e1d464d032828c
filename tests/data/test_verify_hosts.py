"""`ibp-graph verify` on what a host of a sharded run holds: the prepared folder without its feature tables
and store, and of the shards folder its own ranks' rank-<r>/ only (data/verify.py). Everything present is
checked, absent ranks are named, damage is reported by file, and a folder lacking more than the features
(or lacking them without shards) is not ok."""
import shutil
import subprocess
import sys

import pytest

from ibp_graph.data import graphgen, maggen
from ibp_graph.data.graphgen import GraphSpec
from ibp_graph.data.maggen import MagSpec
from ibp_graph.data.shards import write_shards
from ibp_graph.data.verify import check_folder, kind_of, record_checksums
from tests.data.host import sharded_host_copy


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    d = graphgen.generate(GraphSpec(num_nodes=400, avg_citations=3.0, dim=8), tmp_path_factory.mktemp("v") / "p",
                          progress=False)
    write_shards(d, 2, progress=False)
    return d


def _host(prepared, tmp_path, rank: int):
    """A host of rank `rank`: the host copy, with the other rank's shard folder removed."""
    host = sharded_host_copy(prepared, tmp_path / "host")
    shutil.rmtree(host / "shards-2" / f"rank-{1 - rank}")
    return host


def _by_kind(reports):
    return {r.kind: r for r in reports}


def test_a_whole_prepared_folder_is_checked_with_its_store_and_shards(prepared):
    reports = check_folder(prepared)
    assert [r.kind for r in reports] == ["prepared", "store", "shards"] and all(r.ok for r in reports)
    assert "1 table(s) x 2 of 2 ranks' shards (ranks 0-1) checked" in _by_kind(reports)["shards"].message
    assert "host" not in _by_kind(reports)["prepared"].message


@pytest.mark.parametrize("rank", [0, 1])
def test_a_hosts_folder_is_ok_and_says_what_it_does_not_hold(prepared, tmp_path, rank):
    host = _host(prepared, tmp_path, rank)
    reports = _by_kind(check_folder(host))
    assert sorted(reports) == ["prepared", "shards"] and all(r.ok for r in reports.values())
    assert "without x.npy and the store (a host of a sharded run" in reports["prepared"].message
    whole = _by_kind(check_folder(prepared))["prepared"].message
    assert int(reports["prepared"].message.split()[0]) == int(whole.split()[0]) - 1  # every file but x.npy
    assert f"1 of 2 ranks' shards (rank {rank}) checked; 1 rank(s) not on this host" in reports["shards"].message
    assert kind_of(host / "shards-2") == "shards" and check_folder(host / "shards-2")[0].ok


def test_a_damaged_shard_on_a_host_is_reported_by_file(prepared, tmp_path):
    host = _host(prepared, tmp_path, 1)
    payload = next((host / "shards-2" / "rank-1").rglob("payload.bin"))
    payload.unlink()  # a hard link to the prepared folder's file: replace it, do not write through it
    data = bytearray((prepared / "shards-2" / "rank-1" / payload.parent.name / "payload.bin").read_bytes())
    data[len(data) // 2] ^= 0x10
    payload.write_bytes(bytes(data))
    shards = _by_kind(check_folder(host))["shards"]
    assert not shards.ok and "payload.bin" in shards.message
    proc = subprocess.run([sys.executable, "-m", "ibp_graph.cli", "verify", str(host)], capture_output=True, text=True)
    assert proc.returncode == 1 and "(shards): DAMAGED" in proc.stdout and "(prepared): ok" in proc.stdout


def test_features_missing_without_shards_or_more_missing_are_not_ok(prepared, tmp_path):
    host = _host(prepared, tmp_path, 0)
    (host / "y.npy").unlink()
    report = _by_kind(check_folder(host))["prepared"]
    assert not report.ok and "y.npy" in report.message
    bare = sharded_host_copy(prepared, tmp_path / "bare")
    shutil.rmtree(bare / "shards-2")
    report = check_folder(bare)[0]
    assert not report.ok and "x.npy" in report.message  # features missing and no shards: damage, not a host


def test_a_shards_folder_without_any_ranks_folder_is_not_ok(prepared, tmp_path):
    shards = tmp_path / "shards-2"
    shutil.copytree(prepared / "shards-2", shards)
    for r in (0, 1):
        shutil.rmtree(shards / f"rank-{r}")
    report = check_folder(shards)[0]
    assert not report.ok and "holds no rank's shards" in report.message


def test_a_heterogeneous_hosts_folder_is_ok(tmp_path):
    spec = MagSpec(num_papers=300, num_authors=200, num_institutions=10, num_fields=20, dim=8)
    d = maggen.generate(spec, tmp_path / "mag", progress=False)
    write_shards(d, 2, progress=False)
    host = sharded_host_copy(d, tmp_path / "host")
    reports = _by_kind(check_folder(host))
    assert sorted(reports) == ["hetero", "shards"] and all(r.ok for r in reports.values())
    assert "nodes/paper/x.npy" in reports["hetero"].message and "2 of 2 ranks' shards" in reports["shards"].message


def test_recording_checksums_leaves_shards_alone(prepared, tmp_path):
    host = _host(prepared, tmp_path, 0)
    with pytest.raises(ValueError, match="already has checksums.json"):
        record_checksums(host)  # the prepared folder has them; the shards pin their files in shards.json


@pytest.mark.parametrize("damage", ["store removed", "store/x removed", "store/x emptied", "store meta.json removed"])
def test_a_prepared_folders_missing_or_emptied_store_is_not_ok(prepared, tmp_path, damage):
    d = tmp_path / "p"
    shutil.copytree(prepared, d)
    shutil.rmtree(d / "shards-2")  # not a host of a sharded run: its store is its own to check
    if damage == "store removed":
        shutil.rmtree(d / "store")
    elif damage == "store/x removed":
        shutil.rmtree(d / "store" / "x")
    else:
        for p in (d / "store" / "x").iterdir():
            if damage == "store/x emptied" or p.name == "meta.json":
                p.unlink()
    reports = check_folder(d)
    assert [r.kind for r in reports] == ["prepared", "store"] and reports[0].ok and not reports[1].ok
    assert str(d / "store" / "x") in reports[1].message
    if damage.endswith("removed") and "meta" not in damage:
        assert f"is missing; {d / 'meta.json'} records a feature store there" in reports[1].message
    proc = subprocess.run([sys.executable, "-m", "ibp_graph.cli", "verify", str(d)], capture_output=True, text=True)
    assert proc.returncode == 1 and "(store): DAMAGED" in proc.stdout


def test_a_heterogeneous_folders_missing_store_is_not_ok(tmp_path):
    spec = MagSpec(num_papers=300, num_authors=200, num_institutions=10, num_fields=20, dim=8)
    d = maggen.generate(spec, tmp_path / "mag", progress=False)
    assert all(r.ok for r in check_folder(d))
    shutil.rmtree(d / "nodes" / "paper" / "store")
    reports = _by_kind(check_folder(d))
    assert reports["hetero"].ok and not reports["store"].ok
    assert f"{d / 'nodes' / 'paper' / 'store'} is missing" in reports["store"].message
