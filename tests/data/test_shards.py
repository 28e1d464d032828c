"""Sharded feature tables: ShardLayout (which rank holds which row), and shards on disk (write_shards,
load_shard): bit-exact round trips, and every swapped, damaged or inconsistent file refused by name."""
import json
import re
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch

from ibp_graph.data import graphgen, maggen
from ibp_graph.data.checksums import ChecksumError
from ibp_graph.data.graphgen import GraphSpec
from ibp_graph.data.hetero import HeteroPreparedDataset
from ibp_graph.data.maggen import MagSpec
from ibp_graph.data.prepared import PreparedDataset
from ibp_graph.data.input_stats import SAMPLE_ROWS, feature_stats, from_hex, to_hex
from ibp_graph.data.shards import (SHARDS_MANIFEST, ShardChecksumError, ShardLayout, ShardManifestError,
                                   check_source, default_shards_dir, load_shard, shard_layout, shard_of, shard_rank,
                                   shard_tables, table_input, write_shards)
from ibp_graph.data.store import EncodedTable
from ibp_graph.files import OutputFolderError, is_own_output


# ---- ShardLayout -------------------------------------------------------------------------------------------

def test_contiguous_layout_splits_rows_evenly_and_locates_them():
    lay = ShardLayout.contiguous(10, 3)
    assert lay.counts.tolist() == [4, 3, 3] and lay.kind == "contiguous"
    assert [lay.rows_of(r).tolist() for r in range(3)] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    owner, local = lay.locate(np.array([0, 3, 4, 9, 7]))
    assert owner.tolist() == [0, 0, 1, 2, 2] and local.tolist() == [0, 3, 0, 2, 0]
    assert lay.owner_array().tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_assignment_layout_keeps_each_ranks_rows_in_ascending_id():
    owner = np.array([2, 0, 1, 0, 2, 2, 1])
    lay = ShardLayout.from_assignment(owner)
    assert lay.world_size == 3 and lay.counts.tolist() == [2, 2, 3]
    assert [lay.rows_of(r).tolist() for r in range(3)] == [[1, 3], [2, 6], [0, 4, 5]]
    o, local = lay.locate(np.arange(7))
    assert o.tolist() == owner.tolist()
    for r in range(3):  # a rank's shard row k is its k-th node
        assert local[lay.rows_of(r)].tolist() == list(range(lay.counts[r]))
    assert lay != ShardLayout.contiguous(7, 3) and lay == ShardLayout.from_assignment(owner.copy(), 3)
    assert lay.describe()["digest"] != ShardLayout.from_assignment(owner[::-1].copy(), 3).describe()["digest"]


def test_layout_errors_name_the_argument_and_what_is_accepted():
    with pytest.raises(ValueError, match=r"world_size=0 is not accepted; use an int >= 1"):
        ShardLayout(5, 0)
    with pytest.raises(ValueError, match=r"num_rows=-1 is not accepted"):
        ShardLayout(-1, 2)
    with pytest.raises(ValueError, match=r"owner\[1\]=3 is not a rank of world_size=2"):
        ShardLayout.from_assignment([0, 3, 1], 2)
    with pytest.raises(ValueError, match=r"owner has shape \(2, 2\)"):
        ShardLayout(4, 2, owner=np.zeros((2, 2), np.int64))
    with pytest.raises(IndexError, match="ids"):
        ShardLayout.contiguous(5, 2).locate(np.array([5]))
    with pytest.raises(ValueError, match=r"rank=2 is not accepted; use an int in \[0, world_size=2\)"):
        ShardLayout.contiguous(5, 2).rows_of(2)
    for owner in (np.zeros((3, 2), np.int64), np.int64(3)):  # not 1-d: named by its shape, not as num_rows=-1
        with pytest.raises(ValueError, match=rf"owner has shape {re.escape(str(owner.shape))}; accepted: a 1-d "
                                             "integer array"):
            ShardLayout.from_assignment(owner, 2)


@pytest.mark.parametrize("rank", [1.5, 1.0, "1", True, -1, 2])
def test_a_rank_that_is_not_an_int_of_the_layout_is_refused_by_name(rank):
    lay = ShardLayout.contiguous(10, 2)
    store = EncodedTable.encode(torch.randn(10, 4), "identity", progress=False)
    for call in (lambda: lay.rows_of(rank), lambda: shard_of(store, lay, rank)):
        with pytest.raises(ValueError, match=rf"rank={re.escape(repr(rank))} is not accepted; use an int in "
                                             r"\[0, world_size=2\)"):
            call()


# ---- shards on disk ----------------------------------------------------------------------------------------

def _table(codec="auto", n=700, dim=12):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(n, dim, generator=g) * 8).round() / 8  # compressible: auto picks a real codec
    x[::9, 2] = float("nan")
    return x, EncodedTable.encode(x, codec, progress=False)


def _rows(shard: EncodedTable) -> torch.Tensor:
    return shard.decode_rows(torch.arange(shard.n_rows))


@pytest.mark.parametrize("codec", ["auto", "identity"])
def test_write_and_load_round_trip_bit_exact(tmp_path, codec):
    x, store = _table(codec)
    out = write_shards(store, 3, tmp_path / "s", progress=False)
    assert shard_tables(out) == ["x"]
    for r in range(3):
        shard, layout = load_shard(out, r, world_size=3, verify="full")
        assert layout == ShardLayout.contiguous(x.shape[0], 3)
        assert shard_rank(shard) == r == shard_rank(shard_of(store, layout, r))  # whose rows it holds
        assert shard_layout(shard) == layout.describe() == shard_layout(shard_of(store, layout, r))  # cut by
        assert shard.codec.fingerprint == store.codec.fingerprint  # one codec, nothing re-encoded
        got = _rows(shard)
        want = x[torch.from_numpy(layout.rows_of(r))]
        assert torch.equal(got.view(torch.int32), want.view(torch.int32))  # NaNs included, bit for bit


def test_assignment_layout_round_trip(tmp_path):
    x, store = _table()
    owner = torch.randint(0, 2, (x.shape[0],), generator=torch.Generator().manual_seed(3)).numpy()
    lay = ShardLayout.from_assignment(owner, 2)
    out = write_shards({"x": store}, 2, tmp_path / "s", layouts={"x": lay}, progress=False)
    for r in range(2):
        shard, layout = load_shard(out, r)
        assert layout == lay and shard_layout(shard) == lay.describe()  # the layout it was cut by, recorded
        assert torch.equal(_rows(shard).view(torch.int32), x[torch.from_numpy(lay.rows_of(r))].view(torch.int32))
    np.save(out / "layouts" / "x.npy", owner[::-1].copy())  # another assignment
    with pytest.raises(ShardChecksumError, match=r"layouts/x.npy: its SHA-256 differs .* table 'x'"):
        load_shard(out, 0)


def test_a_swapped_replaced_or_damaged_shard_is_refused_by_name(tmp_path):
    _, store = _table()
    out = write_shards(store, 2, tmp_path / "s", progress=False)
    swapped = tmp_path / "swapped"
    shutil.copytree(out, swapped)
    shutil.rmtree(swapped / "rank-0" / "x")
    shutil.copytree(out / "rank-1" / "x", swapped / "rank-0" / "x")  # rank 1's shard where rank 0's belongs
    with pytest.raises(ShardChecksumError, match=r"rank 0's shard of table 'x' is not the one shards.json "
                                                 r"recorded \(checksums.json differs\)"):
        load_shard(swapped, 0)
    assert isinstance(ShardChecksumError("x"), ChecksumError)
    # a payload byte flipped: checksums.json still matches the manifest, the chunk does not
    payload = out / "rank-1" / "x" / "payload.bin"
    data = bytearray(payload.read_bytes())
    data[5] ^= 0xFF
    payload.write_bytes(bytes(data))
    with pytest.raises(ShardChecksumError, match=r"(?s)rank 1's shard of table 'x': .*payload.bin: checksum differs"):
        load_shard(out, 1, verify="full")
    # its checksums rewritten to bless the damage: the manifest's digest of checksums.json refuses it
    from ibp_graph.data.checksums import write_manifest
    from ibp_graph.data.store import store_files

    write_manifest(payload.parent, store_files(payload.parent))
    with pytest.raises(ShardChecksumError, match=r"rank-1/x: rank 1's shard .*\(checksums.json differs"):
        load_shard(out, 1)
    load_shard(out, 0)  # the other rank's shard is untouched
    shutil.rmtree(out / "rank-0")
    with pytest.raises(FileNotFoundError, match=r"rank-0/x is missing: rank 0's shard of table 'x' \(copy rank-0/"):
        load_shard(out, 0)


def test_a_truncated_or_edited_manifest_is_refused_naming_the_field(tmp_path):
    _, store = _table()
    out = write_shards(store, 2, tmp_path / "s", progress=False)
    path = out / SHARDS_MANIFEST
    good = json.loads(path.read_text())
    path.write_text(path.read_text()[:200])
    with pytest.raises(ShardManifestError, match=r"shards.json is not readable JSON"):
        load_shard(out, 0)

    def edited(change):
        m = json.loads(json.dumps(good))
        change(m)
        path.write_text(json.dumps(m))
        return m

    cases = [
        (lambda m: m.update(format="other"), r"has format 'other' version 1; this ibp-graph reads 'ibp_graph.shards'"),
        (lambda m: m.update(world_size="2"), r"world_size='2' is not accepted; expected an int >= 1"),
        (lambda m: m["tables"]["x"]["layout"].update(counts=[1, 1]),
         r"tables.x.layout.counts=\[1, 1\] is not accepted; expected 2 ints >= 1 summing to num_rows=700"),
        (lambda m: m["tables"]["x"]["ranks"][1].update(dir="../../elsewhere"),
         r"tables.x.ranks\[1\].dir='../../elsewhere' is not accepted; expected 'rank-1/x'"),
        (lambda m: m["tables"]["x"]["ranks"].pop(), r"tables.x.ranks='<1 entries>' is not accepted; expected one "
                                                    r"entry per rank \(2\)"),
        (lambda m: m["tables"]["x"]["ranks"][0]["sha256"].pop("meta.json"), r"tables.x.ranks\[0\].sha256="),
        (lambda m: m["tables"]["x"]["layout"].update(digest="0" * 64), r"tables.x.layout=.* does not describe"),
        (lambda m: m["tables"]["x"].update(fingerprint=1), r"holds codec, fingerprint, shape, dtype"),
        (lambda m: m["tables"]["x"].update(stats=[]), r"tables.x.stats=\[\] is not accepted; expected a mapping of "
                                                      r"sample_rows, seed, mean and std"),
        (lambda m: m["tables"]["x"]["stats"]["mean"].pop(), r"tables.x.stats.mean='<11 entries>' is not accepted; "
                                                            r"expected a list of 12 float32 bit patterns in hex"),
        (lambda m: m["tables"]["x"]["stats"].update(std=1.5), r"tables.x.stats.std=1.5 is not accepted; expected a "
                                                              r"list of 12"),
        (lambda m: m["tables"]["x"]["stats"]["std"].__setitem__(3, "3F800000"),
         r"tables.x.stats.std='<12 entries>' is not accepted; expected a list of float32 bit patterns in hex "
         r"\(entry 3 \('3F800000'\) is not the 8 lowercase hex digits"),
        (lambda m: m["tables"]["x"]["stats"].update(sample_rows=True), r"tables.x.stats.sample_rows=True is not "
                                                                       r"accepted; expected an int >= 1"),
    ]
    for change, message in cases:
        edited(change)
        with pytest.raises(ShardManifestError, match=message):
            load_shard(out, 0)
        if "stats" in message:
            with pytest.raises(ShardManifestError, match=message):
                table_input(out, "x")
    path.unlink()
    with pytest.raises(FileNotFoundError, match=r"shards.json is missing"):
        load_shard(out, 0)


def _bits(t: torch.Tensor) -> list:
    return t.view(torch.int32).tolist()


@pytest.mark.parametrize("n", [700, SAMPLE_ROWS + 4321])  # the whole table; a random sample of it
def test_the_manifest_records_the_input_statistics_of_the_whole_table_bit_for_bit(tmp_path, n):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 6, generator=g)
    x[:, 0] = x[:, 0] * 1e30 + 1e31          # huge, where float32 sums would lose the small part
    x[:, 1] = x[:, 1] * 1e-40                # subnormals
    x[::3, 2] = -0.0
    x[:, 3] = torch.randint(0, 3, (n,), generator=g) / 3.0  # thirds: no exact float
    x[5, 4] = float("nan")                   # a NaN mean and std
    x[:, 5] = 7.25                           # constant: std 0
    store = EncodedTable.encode(x, "auto", progress=False)
    out = write_shards(store, 3, tmp_path / "s", progress=False)
    mean, std = feature_stats(x)
    got = table_input(out, "x")
    assert got.width == 6 and got.mean.dtype == got.std.dtype == torch.float32
    assert _bits(got.mean) == _bits(mean) and _bits(got.std) == _bits(std)  # NaN included, bit for bit
    assert torch.isnan(got.mean[4]) and got.std[5] == 0 and _bits(feature_stats(x[1:])[0]) != _bits(mean)
    entry = json.loads((out / SHARDS_MANIFEST).read_text())["tables"]["x"]["stats"]
    assert entry["sample_rows"] == SAMPLE_ROWS and entry["seed"] == 0 and entry["mean"] == to_hex(mean)


def test_statistics_round_trip_their_float32_bit_patterns():
    values = torch.tensor([0.0, -0.0, 1 / 3, 1e-45, -3.4028235e38, float("inf"), float("nan")], dtype=torch.float32)
    assert to_hex(values)[:2] == ["00000000", "80000000"]
    assert _bits(from_hex(to_hex(values))) == _bits(values)
    with pytest.raises(ValueError, match=r"entry 1 \('0x3f80000'\) is not the 8 lowercase hex digits"):
        from_hex(["3f800000", "0x3f80000"])


def test_a_manifest_written_before_the_statistics_still_opens_and_has_none(tmp_path):
    x, store = _table()
    out = write_shards(store, 2, tmp_path / "s", progress=False)
    m = json.loads((out / SHARDS_MANIFEST).read_text())
    del m["tables"]["x"]["stats"]
    (out / SHARDS_MANIFEST).write_text(json.dumps(m))
    assert table_input(out, "x") is None
    shard, layout = load_shard(out, 1)
    assert torch.equal(_rows(shard).view(torch.int32), x[torch.from_numpy(layout.rows_of(1))].view(torch.int32))
    with pytest.raises(ValueError, match=r"table='paper' is not accepted; .* holds the tables \['x'\]"):
        table_input(out, "paper")


@pytest.mark.parametrize("codec", ["identity", "ibp"])
def test_shards_of_a_zero_width_table_load_on_every_rank(tmp_path, codec):
    """A table of rows of no columns (identity: rows of 0 bytes, an empty payload.bin in each shard) is written and
    opened again, mapped (before: write_shards wrote it, and load_shard failed with numpy's "cannot mmap an empty
    file"; `codec="auto"` picks identity for such a table)."""
    x = torch.randn(9, 0)
    out = write_shards(EncodedTable.encode(x, codec, progress=False), 2, tmp_path / "s", progress=False)
    for r in range(2):
        shard, layout = load_shard(out, r, world_size=2, verify="full")
        assert tuple(shard.shape) == (int(layout.counts[r]), 0) and _rows(shard).shape == (int(layout.counts[r]), 0)
    assert table_input(out, "x").width == 0


def test_only_tables_of_rows_of_one_dimension_are_sharded(tmp_path):
    store = EncodedTable.encode(torch.randn(12, 2, 3), "identity", progress=False)
    with pytest.raises(ValueError, match=r"table 'x' has shape \(12, 2, 3\); shards hold feature tables of shape "
                                         r"\(rows, dim\)"):
        write_shards(store, 2, tmp_path / "s", progress=False)


def test_wrong_rank_count_and_bad_arguments_are_refused(tmp_path):
    _, store = _table(n=5)
    out = write_shards(store, 2, tmp_path / "s", progress=False)
    with pytest.raises(ShardManifestError, match=r"holds shards for world_size=2 ranks; this run has 4: write "
                                                 r"shards for it with `ibp-graph prepare --shards 4`"):
        load_shard(out, 0, world_size=4)
    with pytest.raises(ValueError, match=r"rank=2 is not accepted; use an int in \[0, 2\)"):
        load_shard(out, 2)
    with pytest.raises(ValueError, match=r"table='paper' is not accepted; .* holds the tables \['x'\]"):
        load_shard(out, 0, table="paper")
    with pytest.raises(ValueError, match=r"world_size=0 is not accepted; use an int >= 1"):
        write_shards(store, 0, tmp_path / "t", progress=False)
    with pytest.raises(ValueError, match=r"world_size=6 is not accepted for table 'x' of 5 rows: rank 5 would hold "
                                         r"no row; .*at most 5 ranks"):
        write_shards(store, 6, tmp_path / "t", progress=False)
    with pytest.raises(ValueError, match=r"table 'x' has no rows: there is nothing to shard; accepted: tables of at "
                                         r"least world_size=2 rows"):
        write_shards(EncodedTable.encode(torch.zeros(0, 3), "identity", progress=False), 2, tmp_path / "t",
                     progress=False)
    with pytest.raises(ValueError, match="out is required"):
        write_shards(store, 2, progress=False)
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds files ibp-graph did not write"):
        write_shards(store, 2, tmp_path / "theirs", progress=False)


def test_write_shards_replaces_only_earlier_shards_and_never_a_prepared_folder(tmp_path):
    """out= a prepared folder (ibp-graph's own output, so check_output alone accepts it) is refused, every file
    of it kept, whether the source is a table opened from its store (its folder is an input) or one that
    does not say where it came from; out= earlier shards is written again."""
    d = graphgen.generate(GraphSpec(num_nodes=400, avg_citations=3.0, dim=8), tmp_path / "p", progress=False)
    files = {p.relative_to(d): p.read_bytes() for p in d.rglob("*") if p.is_file()}
    for verify in ("sample", "none"):  # "none": no checksum guard, so the table does not know its folder
        store = EncodedTable.load(d / "store" / "x", verify=verify)
        for out in (d, d / "store", d / "store" / "x"):
            with pytest.raises(OutputFolderError, match=re.escape(str(out))):
                write_shards(store, 2, out, progress=False)
    with pytest.raises(OutputFolderError, match=rf"out='{re.escape(str(d))}' holds .*meta.json.* and no shards.json: "
                                                "it is not a shards folder"):
        write_shards(EncodedTable.load(d / "store" / "x", verify="none"), 2, d, progress=False)
    assert {p.relative_to(d): p.read_bytes() for p in d.rglob("*") if p.is_file()} == files  # nothing lost
    PreparedDataset.load(d)
    _, other = _table(n=400, dim=8)
    out = write_shards(other, 2, tmp_path / "s", progress=False)
    out = write_shards(other, 2, out, progress=False)  # its own earlier shards: replaced
    assert shard_tables(out) == ["x"] and load_shard(out, 1)[0].n_rows == 200



def test_shards_record_the_raw_table_they_were_cut_from_and_another_data_sets_are_refused(tmp_path):
    """Two generated data sets of one shape (seeds 0 and 1): shards cut from one are refused for the other by
    name, accepted for their own (on a host copy without x.npy and store/ too); a table given without its
    prepared folder, and a manifest written before the record existed, are not compared."""
    spec = GraphSpec(num_nodes=400, avg_citations=3.0, dim=8)
    a = graphgen.generate(spec, tmp_path / "a", progress=False)
    b = graphgen.generate(replace(spec, seed=1), tmp_path / "b", progress=False)
    shards = write_shards(b, 2, tmp_path / "s", progress=False)
    check_source(shards, "x", b, "x.npy")
    host = tmp_path / "host"  # a host's copy: neither x.npy nor store/
    shutil.copytree(b, host, ignore=shutil.ignore_patterns("x.npy", "store"))
    check_source(shards, "x", host, "x.npy")
    with pytest.raises(ShardManifestError, match=rf"table 'x' was cut from another x.npy than the one "
                                                 rf"{re.escape(str(a))} holds .*shards of another data set"):
        check_source(shards, "x", a, "x.npy")
    m = json.loads((shards / SHARDS_MANIFEST).read_text())
    assert re.fullmatch(r"[0-9a-f]{64}", m["tables"]["x"]["source"])
    del m["tables"]["x"]["source"]  # as an older ibp-graph wrote it
    (shards / SHARDS_MANIFEST).write_text(json.dumps(m))
    check_source(shards, "x", a, "x.npy")
    m["tables"]["x"]["source"] = "x.npy"
    (shards / SHARDS_MANIFEST).write_text(json.dumps(m))
    with pytest.raises(ShardManifestError, match=r"tables.x.source"):
        check_source(shards, "x", b, "x.npy")
    loose = write_shards(EncodedTable.load(b / "store" / "x"), 2, tmp_path / "t", progress=False)
    assert json.loads((loose / SHARDS_MANIFEST).read_text())["tables"]["x"]["source"] is None
    check_source(loose, "x", a, "x.npy")

def test_a_layouts_key_that_names_no_table_is_refused(tmp_path):
    _, store = _table(n=100)
    lay = ShardLayout.from_assignment(np.arange(100) % 2, 2)
    with pytest.raises(ValueError, match=r"layouts\['papers'\] names no table of the source; its tables are "
                                         r"\['paper'\]"):
        write_shards({"paper": store}, 2, tmp_path / "s", layouts={"papers": lay}, progress=False)
    with pytest.raises(TypeError, match="layouts must be a mapping of table names to ShardLayouts, got list"):
        write_shards({"paper": store}, 2, tmp_path / "s", layouts=[lay], progress=False)
    assert not (tmp_path / "s").exists()


def test_a_prepared_folder_gets_its_shards_inside_it(tmp_path, capsys):
    d = graphgen.generate(GraphSpec(num_nodes=400, avg_citations=3.0, dim=8), tmp_path / "p", progress=False)
    out = write_shards(d, 2)
    assert out == default_shards_dir(d, 2) == d / "shards-2"
    assert "wrote" in capsys.readouterr().out
    ds = PreparedDataset.load(d)
    for r in range(2):
        shard, layout = load_shard(out, r)
        assert torch.equal(_rows(shard), ds.x[torch.from_numpy(layout.rows_of(r))])
    assert is_own_output(d)  # prepared again, the folder (shards included) is replaced as ibp-graph's own
    write_shards(d, 2, progress=False)  # written again over its own earlier shards


def test_a_heterogeneous_folder_has_a_table_per_featured_node_type(tmp_path):
    spec = MagSpec(num_papers=300, num_authors=200, num_institutions=10, num_fields=20, dim=8)
    d = maggen.generate(spec, tmp_path / "mag", progress=False)
    ds = HeteroPreparedDataset.load(d)
    out = write_shards(d, 2, progress=False)
    assert shard_tables(out) == sorted(ds.x_dict)
    for t, x in ds.x_dict.items():
        for r in range(2):
            shard, layout = load_shard(out, r, table=t)
            assert torch.equal(_rows(shard), x[torch.from_numpy(layout.rows_of(r))])



def test_prepare_shards_command_writes_and_reuses_a_prepared_folder(tmp_path, capsys):
    from ibp_graph.cli import main

    sets = ["--set", "data.synthetic.num_nodes=300", "--set", "data.synthetic.dim=4"]
    assert main(["prepare", "--dataset", "synthetic", "--root", str(tmp_path), *sets, "--shards", "2",
                 "--quiet"]) == 0
    (d,) = tmp_path.glob("synthetic-300-*")
    meta = (d / "meta.json").stat().st_mtime_ns
    assert shard_tables(d / "shards-2") == ["x"]
    assert main(["prepare", "--dataset", "synthetic", "--root", str(tmp_path), *sets, "--shards", "3"]) == 0
    assert "is prepared already: writing its shards only" in capsys.readouterr().out
    assert (d / "meta.json").stat().st_mtime_ns == meta  # not prepared again
    load_shard(d / "shards-3", 2, world_size=3)
    assert main(["prepare", "--dataset", "synthetic", "--root", str(tmp_path), *sets, "--shards", "301"]) == 1
    assert "world_size=301 is not accepted for table 'x' of 300 rows" in capsys.readouterr().err
    for bad, message in ((["--shards", "0"], "--shards 0 is not accepted"),
                         (["--shards", "2", "--no-store"], "--shards with --no-store is not accepted")):
        with pytest.raises(SystemExit):
            main(["prepare", "--dataset", "synthetic", "--root", str(tmp_path), *sets, *bad])
        assert message in capsys.readouterr().err


def test_prepare_shards_keeps_a_stores_codec_unless_codec_asks_for_another(tmp_path, capsys):
    """`prepare --shards W` on a folder prepared already: without --codec its store is kept whatever its codec (and
    the line says which); --codec NAME keeps only a store of that codec; --codec auto only one of the codec auto
    picks now (fitted again on a row sample), so a store encoded with --codec identity is encoded again."""
    from ibp_graph.cli import main

    base = ["prepare", "--dataset", "synthetic", "--root", str(tmp_path), "--set", "data.synthetic.num_nodes=1200",
            "--set", "data.synthetic.dim=16"]
    assert main([*base, "--codec", "identity", "--quiet"]) == 0
    (d,) = tmp_path.glob("synthetic-1200-*")
    codecs = lambda: (PreparedDataset.load(d).store_codec,  # noqa: E731
                      json.loads((d / "shards-2" / SHARDS_MANIFEST).read_text())["tables"]["x"]["codec"])
    capsys.readouterr()
    for asked in ([], ["--codec", "identity"]):
        assert main([*base, "--shards", "2", *asked]) == 0
        out = capsys.readouterr().out
        assert f"{d} is prepared already: writing its shards only" in out and codecs() == ("identity", "identity")
        assert ("its store's codec, identity, is kept: --codec NAME or --codec auto asks for one" in out) == (not asked)
    assert main([*base, "--shards", "2", "--codec", "auto"]) == 0
    assert f"{d} holds a feature store encoded with identity (asked for --codec auto, which picks ebp for it): " \
           "preparing it again" in capsys.readouterr().out
    assert codecs() == ("ebp", "ebp")
    assert main([*base, "--shards", "2", "--codec", "auto"]) == 0  # auto's own store: kept
    assert f"{d} is prepared already: writing its shards only\n" in capsys.readouterr().out
    assert main([*base, "--shards", "2", "--codec", "ibp", "--quiet"]) == 0
    assert codecs() == ("ibp", "ibp")
