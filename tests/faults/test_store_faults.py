"""Issue 13, feature store rows: damaged store files raise errors naming the file; nothing crashes or passes as good."""
import json
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch

from ibp_graph.codec import CorruptPayloadError
from ibp_graph.data import checksums
from ibp_graph.data.checksums import ChecksumError, UnverifiedDataWarning
from ibp_graph.data.store import EncodedTable
from ibp_graph.data.synthetic import make_family
from tests.faults.isolated import ROOT, expect_clean_exit, run_python

ROWS = 3000

# Opens the store, decodes every row, and prints the outcome: a crash shows as a non-zero exit.
LOAD_AND_DECODE = """
import sys, torch
from ibp_graph.data.store import EncodedTable
try:
    t = EncodedTable.load(sys.argv[1], verify=sys.argv[2])
    out = t.decode_rows(torch.arange(t.n_rows))
    ref = torch.load(sys.argv[3]) if len(sys.argv) > 3 else None
    print("LOADED", "same" if ref is not None and torch.equal(out.view(torch.uint8), ref.view(torch.uint8)) else "")
except Exception as e:
    print("ERROR", type(e).__name__, e)
"""


@pytest.fixture(scope="module")
def table():
    return make_family("embedding_f32", ROWS)


@pytest.fixture(scope="module")
def stores(tmp_path_factory, table):
    base = tmp_path_factory.mktemp("stores")
    for name in ("ibp", "ebp", "identity"):
        EncodedTable.encode(table, name, directory=base / name, progress=False)
    torch.save(table, base / "table.pt")
    return base


def fresh(stores, tmp_path, codec):
    d = tmp_path / codec
    shutil.copytree(stores / codec, d)
    return d


def outcome(d, verify, stores=None):
    args = [d, verify] + ([stores / "table.pt"] if stores is not None else [])
    return expect_clean_exit(run_python(LOAD_AND_DECODE, *args)).strip()


def rewrite_offsets(d, fn, dtype=None):
    o = np.load(d / "offsets.npy")
    o = fn(o.copy())
    np.save(d / "offsets.npy", o if dtype is None else o.astype(dtype))


@pytest.mark.parametrize("codec", ["ibp", "ebp"])
@pytest.mark.parametrize("verify", ["sample", "none"])
def test_an_offset_far_out_of_range_is_refused_not_a_segfault(stores, tmp_path, codec, verify):
    d = fresh(stores, tmp_path, codec)
    o = np.load(d / "offsets.npy").astype(np.int64)
    o[1500] = 1 << 40
    np.save(d / "offsets.npy", o)
    out = outcome(d, verify)
    assert out.startswith("ERROR") and "offsets.npy" in out
    if verify == "none":  # the structure check alone
        assert "CorruptPayloadError" in out and "row 1499 runs from offset" in out


@pytest.mark.parametrize("verify", ["sample", "none"])
def test_offsets_rewritten_as_int16_are_refused(stores, tmp_path, verify):
    d = fresh(stores, tmp_path, "ibp")
    rewrite_offsets(d, lambda o: o, dtype=np.int16)
    out = outcome(d, verify)
    assert out.startswith("ERROR") and "offsets.npy" in out
    if verify == "none":
        assert "holds int16" in out and "int32 or int64" in out


@pytest.mark.parametrize("codec", ["ibp", "ebp", "identity"])
def test_one_bit_flipped_in_the_payload_is_caught_on_open(stores, tmp_path, codec):
    d = fresh(stores, tmp_path, codec)
    raw = bytearray((d / "payload.bin").read_bytes())
    raw[len(raw) // 3] ^= 0x10
    (d / "payload.bin").write_bytes(bytes(raw))
    chunk = (len(raw) // 3) // checksums.CHUNK_BYTES
    for verify in ("sample", "full"):  # a small store: "sample" reads every chunk too
        with pytest.raises(ChecksumError, match=rf"payload.bin: checksum differs in chunk\(s\) {chunk} "):
            EncodedTable.load(d, verify=verify)


def test_an_ibp_offset_off_by_one_is_caught(stores, tmp_path):
    d = fresh(stores, tmp_path, "ibp")
    rewrite_offsets(d, lambda o: (o.__setitem__(700, o[700] + 1), o)[1])  # still non-decreasing
    out = outcome(d, "sample", stores)
    assert out.startswith("ERROR ChecksumError") and "offsets.npy" in out


def test_an_identity_stores_shape_edited_in_meta_json_is_caught(stores, tmp_path):
    d = fresh(stores, tmp_path, "identity")
    meta = json.loads((d / "meta.json").read_text())
    meta["shape"] = [ROWS, meta["shape"][1] - 1]  # fewer bytes than the payload holds
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ChecksumError, match="identity/meta.json"):
        EncodedTable.load(d)
    with pytest.raises(CorruptPayloadError, match=r"payload.bin has \d+ bytes; meta.json's shape \[3000, 127\]"):
        EncodedTable.load(d, verify="none")  # the size check alone
    meta["shape"] = [ROWS * 2, meta["shape"][1] // 2 + 1]  # the same byte count: only the checksum sees it
    (d / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ChecksumError, match="meta.json"):
        EncodedTable.load(d)


@pytest.mark.parametrize("codec", ["ibp", "ebp", "identity"])
@pytest.mark.parametrize("mmap", [True, False])
def test_load_then_save_onto_the_same_folder_keeps_the_store(stores, tmp_path, table, codec, mmap):
    d = fresh(stores, tmp_path, codec)
    t = EncodedTable.load(d, mmap=mmap)
    t.save(d)
    assert sorted(p.name for p in d.iterdir()) == sorted(
        ["payload.bin", "codec.bin", "meta.json", "checksums.json"] + ([] if codec == "identity" else ["offsets.npy"]))
    again = EncodedTable.load(d, verify="full")
    rows = torch.arange(ROWS)
    assert torch.equal(again.decode_rows(rows).view(torch.uint8), table.view(torch.uint8))
    assert torch.equal(t.decode_rows(rows).view(torch.uint8), table.view(torch.uint8))  # the old map still reads


@pytest.mark.parametrize("content, message", [
    (b"{not json", r"meta.json is not readable JSON"),
    (b"[1, 2, 3]", r"meta.json holds a list; expected a mapping"),
    (None, r"meta.json lacks the key 'shape'"),
])
def test_a_damaged_meta_json_is_named(stores, tmp_path, content, message):
    d = fresh(stores, tmp_path, "ibp")
    if content is None:
        meta = json.loads((d / "meta.json").read_text())
        del meta["shape"]
        content = json.dumps(meta).encode()
    (d / "meta.json").write_bytes(content)
    for verify in ("sample", "none"):
        with pytest.raises(CorruptPayloadError, match=message):
            EncodedTable.load(d, verify=verify)


def test_a_truncated_offsets_file_is_named(stores, tmp_path):
    d = fresh(stores, tmp_path, "ebp")
    data = (d / "offsets.npy").read_bytes()
    (d / "offsets.npy").write_bytes(data[: len(data) // 2])
    with pytest.raises(ChecksumError, match=r"offsets.npy has \d+ bytes; checksums.json recorded"):
        EncodedTable.load(d)
    with pytest.raises(CorruptPayloadError, match=r"offsets.npy is not a readable .npy array .*truncated"):
        EncodedTable.load(d, verify="none")


def test_writing_into_a_memory_mapped_store_neither_crashes_nor_changes_the_file(stores, tmp_path):
    d = fresh(stores, tmp_path, "ebp")
    before = (d / "payload.bin").read_bytes()
    code = """
    import sys, torch
    from ibp_graph.data.store import EncodedTable
    t = EncodedTable.load(sys.argv[1])
    t.compressed.payload[:100] = 7
    t.compressed.offsets[5] = 3
    print("WROTE", int(t.compressed.payload[0]))
    """
    assert expect_clean_exit(run_python(code, d)).strip() == "WROTE 7"  # this process's copy only
    assert (d / "payload.bin").read_bytes() == before
    EncodedTable.load(d, verify="full")


def test_a_store_without_checksums_opens_with_a_warning_and_can_have_them_recorded(stores, tmp_path, table):
    d = fresh(stores, tmp_path, "ibp")
    (d / "checksums.json").unlink()
    with pytest.warns(UnverifiedDataWarning, match="has no checksums.json"):
        t = EncodedTable.load(d)
    assert torch.equal(t.decode_rows(torch.arange(10)), table[:10])
    cli = [sys.executable, "-m", "ibp_graph.cli", "verify"]
    proc = subprocess.run(cli + [str(d)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1 and "UNVERIFIED" in proc.stdout and "no checksums.json" in proc.stdout
    assert "content unverified" in proc.stdout and f"ibp-graph verify --write {d}" in proc.stdout
    proc = subprocess.run(cli + ["--write", str(d)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and "checksums.json" in proc.stdout
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnverifiedDataWarning)
        EncodedTable.load(d, verify="full")
    proc = subprocess.run(cli + ["--write", str(d)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and "already has checksums.json" in proc.stderr


def test_verify_command_names_the_damaged_chunk_and_exits_1(stores, tmp_path):
    d = fresh(stores, tmp_path, "ebp")
    raw = bytearray((d / "payload.bin").read_bytes())
    raw[-40] ^= 1  # the last chunk
    (d / "payload.bin").write_bytes(bytes(raw))
    cli = [sys.executable, "-m", "ibp_graph.cli", "verify"]
    proc = subprocess.run(cli + [str(d)], capture_output=True, text=True, cwd=ROOT)
    last = (len(raw) - 1) // checksums.CHUNK_BYTES
    assert proc.returncode == 1 and "DAMAGED" in proc.stdout
    assert f"payload.bin: checksum differs in chunk(s) {last} " in proc.stdout
    ok = fresh(stores, tmp_path / "ok", "ebp")
    proc = subprocess.run(cli + [str(ok)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and "(store): ok" in proc.stdout


def test_sampled_verification_always_reads_the_first_and_last_chunk_and_full_reads_all(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, 40 * 4096, dtype=np.uint8).tobytes()
    (tmp_path / "f.bin").write_bytes(data)
    checksums.write_manifest(tmp_path, ["f.bin"], chunk_bytes=4096)
    manifest = checksums.read_manifest(tmp_path)
    for chunk in (0, 20, 39):
        damaged = bytearray(data)
        damaged[chunk * 4096 + 5] ^= 1
        (tmp_path / "f.bin").write_bytes(bytes(damaged))
        assert [d.chunks for d in checksums.find_damage(tmp_path, manifest, "full")] == [[chunk]]
        sampled = checksums.find_damage(tmp_path, manifest, "sample", seed=1)
        if chunk in (0, 39):
            assert [d.chunks for d in sampled] == [[chunk]]
        assert checksums.find_damage(tmp_path, manifest, "none") == []
    with pytest.raises(ValueError, match=r"verify='quick' is not accepted; choose from 'full', 'sample', 'none'"):
        checksums.check_mode("quick")


# ---- issue 19: no unverified row is ever decoded; a checksum list must be complete ----------------------------
#: small checksum chunks, so a small store has many (a sampled open checks 18 of them)
SMALL_CHUNKS = 4096


def rechecksum(d, chunk_bytes=SMALL_CHUNKS):
    """Record the store's checksums again in chunks of `chunk_bytes`."""
    checksums.write_manifest(d, sorted(p.name for p in d.iterdir() if p.name != "checksums.json"),
                             chunk_bytes=chunk_bytes)


def row_start(d, row):
    """Where row `row` of the store in `d` starts in payload.bin."""
    if (d / "offsets.npy").is_file():
        return int(np.load(d / "offsets.npy")[row])
    meta = json.loads((d / "meta.json").read_text())
    return row * int(np.prod(meta["shape"][1:])) * 4  # float32 rows


def flip_row_byte(d, row):
    """Flip one payload byte of row `row` after the checksums were recorded; return the chunk it lies in."""
    at = row_start(d, row) + 1
    raw = bytearray((d / "payload.bin").read_bytes())
    raw[at] ^= 0x04
    (d / "payload.bin").write_bytes(bytes(raw))
    return at // json.loads((d / "checksums.json").read_text())["chunk_bytes"]


def open_past_the_sample(d, tries=200):
    """EncodedTable.load(d) with verify="sample", opened again until its random sample of chunks misses
    the damage (an open that passes, as a user sees it)."""
    for _ in range(tries):
        try:
            return EncodedTable.load(d, verify="sample")
        except ChecksumError:
            continue
    raise AssertionError(f"every one of {tries} sampled opens of {d} found the damage")


def damaged_store(table, d, codec, row):
    """A store of `table` in `d`, checksummed in small chunks, with a byte of row `row` flipped; (table, chunk),
    the table opened with verify="sample" past the damage."""
    EncodedTable.encode(table, codec, directory=d, progress=False)
    rechecksum(d)
    chunk = flip_row_byte(d, row)
    return open_past_the_sample(d), chunk


@pytest.mark.parametrize("codec", ["ibp", "ebp", "identity"])
def test_a_damaged_chunk_the_sample_missed_is_caught_when_a_row_in_it_is_read(table, tmp_path, codec):
    t, chunk = damaged_store(table, tmp_path / codec, codec, 1700)
    lo = chunk * SMALL_CHUNKS
    message = rf"payload.bin: checksum differs in chunk\(s\) {chunk} \(bytes {lo}..{lo + SMALL_CHUNKS - 1}\).*row 1700"
    for read in (lambda: t.index_select(torch.tensor([5, 1700, 6])), lambda: t.decode_rows(torch.tensor([1700]))):
        with pytest.raises(ChecksumError, match=message):
            read()
    intact = torch.tensor([0, 5, 2999, 100])
    assert torch.equal(t.decode_rows(intact).view(torch.uint8), table[intact].view(torch.uint8))
    with pytest.raises(ChecksumError, match=message):  # still refused: a damaged chunk is never marked verified
        t.decode_rows(torch.tensor([1700]))
    with pytest.raises(ChecksumError, match=rf"chunk\(s\) {chunk} "):  # nor saved under new checksums
        t.save(tmp_path / "copy")
    assert not (tmp_path / "copy").exists()
    with pytest.raises(ChecksumError, match=rf"chunk\(s\) {chunk} "):
        EncodedTable.load(tmp_path / codec, verify="full")
    with pytest.raises(IndexError, match=r"rows contains 3000, outside the valid range \[0, 3000\)"):
        t.index_select(torch.tensor([3000]))


def test_every_chunk_is_verified_once_and_a_full_open_leaves_nothing_to_check(table, tmp_path, monkeypatch):
    from ibp_graph.data import guard

    d = tmp_path / "s"
    EncodedTable.encode(table, "ibp", directory=d, progress=False)
    rechecksum(d)
    t = EncodedTable.load(d, verify="sample")
    n = t.guard.verified.numel()
    assert n == -(-(d / "payload.bin").stat().st_size // SMALL_CHUNKS) and 0 < int(t.guard.verified.sum()) < n
    hashed = []
    real = guard.xxhash.xxh3_64_intdigest
    monkeypatch.setattr(guard.xxhash, "xxh3_64_intdigest", lambda b: hashed.append(len(b)) or real(b))
    left = n - int(t.guard.verified.sum())
    t.decode_rows(torch.arange(3000))
    assert len(hashed) == left  # each chunk the open did not check, once
    assert bool(t.guard.verified.all()) and t.guard.done
    before = len(hashed)
    t.decode_rows(torch.arange(3000))
    assert len(hashed) == before  # nothing hashed again
    full = EncodedTable.load(d, verify="full")
    assert full.guard.done
    assert EncodedTable.load(d, verify="none").guard is None  # opted out: served unverified
    assert EncodedTable.encode(table[:10], "ibp", progress=False).guard is None  # in memory: nothing to verify


def _gather_rows(t, rows):
    t.index_select(rows)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_chunks_verified_in_another_process_are_not_verified_again(table, tmp_path, method, monkeypatch):
    import multiprocessing

    from ibp_graph.data import guard

    d = tmp_path / "s"
    EncodedTable.encode(table, "ebp", directory=d, progress=False)
    rechecksum(d)
    t = EncodedTable.load(d, verify="sample")
    unverified = (t.guard.verified == 0).nonzero().reshape(-1)
    assert unverified.numel() > 0
    p = multiprocessing.get_context(method).Process(target=_gather_rows, args=(t, torch.arange(3000)))
    p.start()
    p.join(120)
    assert p.exitcode == 0
    assert bool(t.guard.verified.all())  # the child's verification is seen here
    monkeypatch.setattr(guard.xxhash, "xxh3_64_intdigest", lambda b: pytest.fail("a chunk was verified again"))
    assert torch.equal(t.decode_rows(torch.arange(3000)).view(torch.uint8), table.view(torch.uint8))


def edit_manifest(d, fn):
    m = json.loads((d / "checksums.json").read_text())
    fn(m["files"])
    (d / "checksums.json").write_text(json.dumps(m))


@pytest.mark.parametrize("codec, edit, message", [
    ("ibp", lambda f: f.pop("payload.bin"), r"checksums.json has no entry for payload.bin"),
    ("ebp", lambda f: f.pop("offsets.npy"), r"checksums.json has no entry for offsets.npy"),
    ("identity", lambda f: f.pop("meta.json"), r"checksums.json has no entry for meta.json"),
    ("ibp", lambda f: f.clear(), r"checksums.json lists no files"),
])
def test_a_checksum_list_lacking_a_file_is_refused_at_open_and_by_verify(stores, tmp_path, codec, edit, message):
    d = fresh(stores, tmp_path, codec)
    edit_manifest(d, edit)
    for verify in ("sample", "full"):
        with pytest.raises(ChecksumError, match=message + r": every data file of the folder \(payload.bin, "):
            EncodedTable.load(d, verify=verify)
    proc = subprocess.run([sys.executable, "-m", "ibp_graph.cli", "verify", str(d)], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 1 and "DAMAGED" in proc.stdout and re.search(message, proc.stdout)
    proc = subprocess.run([sys.executable, "-m", "ibp_graph.cli", "verify", "--write", str(d)], capture_output=True,
                          text=True, cwd=ROOT)
    assert proc.returncode == 2 and "already has checksums.json" in proc.stderr  # never recorded over


def _also(name):
    def edit(files):
        files[name] = dict(files["meta.json"])
    return edit


@pytest.mark.parametrize("edit, message", [
    (lambda f: f["payload.bin"].update(size=True), r"is not a checksum list of this ibp-graph"),
    (lambda f: f["payload.bin"].update(size=-1), r"is not a checksum list of this ibp-graph"),
    (_also("../../etc/passwd"), r"names \.\./\.\./etc/passwd, outside its folder"),
    (_also("/etc/passwd"), r"names /etc/passwd, outside its folder"),
])
def test_a_checksum_list_of_bool_sizes_or_paths_outside_its_folder_is_refused(stores, tmp_path, edit, message):
    """Nothing read from disk is trusted: a size true (an int to Python) or negative, and file names that leave
    the folder (which verify would read and hash) are refused as a damaged list, at open and by verify."""
    d = fresh(stores, tmp_path, "ibp")
    edit_manifest(d, edit)
    with pytest.raises(ChecksumError, match=message):
        EncodedTable.load(d, verify="full")
    proc = subprocess.run([sys.executable, "-m", "ibp_graph.cli", "verify", str(d)], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 1 and "DAMAGED" in proc.stdout and re.search(message, proc.stdout), proc.stdout


def test_a_prepared_folders_checksum_list_lacking_an_array_is_refused(tmp_path):
    from ibp_graph.data import graphgen
    from ibp_graph.data.graphgen import GraphSpec
    from ibp_graph.data.prepared import PreparedDataset

    d = graphgen.generate(GraphSpec(num_nodes=500, avg_citations=4.0, labeled_fraction=0.5, seed=1),
                          tmp_path / "ds", progress=False, store=False)
    PreparedDataset.load(d, verify="full")
    edit_manifest(d, lambda f: f.pop("graph/indices.npy"))
    with pytest.raises(ChecksumError, match=r"checksums.json has no entry for graph/indices.npy"):
        PreparedDataset.load(d)
    proc = subprocess.run([sys.executable, "-m", "ibp_graph.cli", "verify", str(d)], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 1 and "DAMAGED" in proc.stdout and "no entry for graph/indices.npy" in proc.stdout
