"""EncodedTable: every codec name (auto by default), saved and reloaded with its codec state, gathers bit-exact."""
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from ibp_graph.codec import CorruptPayloadError, EBPCodec, IBPCodec, IdentityCodec, fit_codec
from ibp_graph.data.store import EncodedTable
from ibp_graph.data.synthetic import make_family

ROWS = 5000


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def random_bits(rows=ROWS, dim=32, seed=0) -> torch.Tensor:
    """float32 rows of uniformly random bits (NaN payloads included): nothing compresses them."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-2**31, 2**31 - 1, (rows, dim), generator=g, dtype=torch.int32).view(torch.float32)


@pytest.fixture(scope="module")
def emb() -> torch.Tensor:
    return make_family("embedding_f32", ROWS)


@pytest.mark.parametrize("name, kind", [("ibp", IBPCodec), ("ebp", EBPCodec), ("identity", IdentityCodec)])
def test_named_codecs_encode_save_load_and_gather_exactly(tmp_path, emb, name, kind):
    table = EncodedTable.encode(emb, name, chunk_rows=777, directory=tmp_path / "t")
    assert isinstance(table.codec, kind) and table.codec.name == name
    loaded = EncodedTable.load(tmp_path / "t")
    assert isinstance(loaded.codec, kind)
    assert loaded.codec.fingerprint == table.codec.fingerprint  # the whole codec state came back
    assert loaded.codec.state_dict().keys() == table.codec.state_dict().keys()
    rows = torch.randint(0, ROWS, (700,), generator=torch.Generator().manual_seed(1))
    for t in (table, loaded, EncodedTable.load(tmp_path / "t", mmap=False)):
        assert same_bits(t.decode_rows(torch.arange(ROWS)), emb)
        gathered = t.index_select(rows)  # compressed rows, not decoded
        assert gathered.codec == name and gathered.shape == (700, emb.shape[1])
        assert same_bits(t.codec.decode(gathered), emb[rows])
    if name == "identity":
        assert table.compressed.offsets is None and not (tmp_path / "t" / "offsets.npy").exists()
        assert table.nbytes >= emb.numel() * 4
    else:
        assert (tmp_path / "t" / "offsets.npy").exists() and table.fraction < 0.95


def test_default_is_fit_codecs_choice(emb):
    table = EncodedTable.encode(emb)
    chosen = fit_codec(emb, kind="auto")
    assert table.codec.name == chosen.name and table.codec.fingerprint == chosen.fingerprint
    assert table.codec.name == "ebp"  # EBP is the smaller codec on averaged embeddings
    assert same_bits(table.decode_rows(torch.arange(ROWS)), emb)


def test_random_bits_get_identity_through_auto(tmp_path):
    x = random_bits()
    table = EncodedTable.encode(x, "auto", directory=tmp_path / "r")
    assert isinstance(table.codec, IdentityCodec)
    loaded = EncodedTable.load(tmp_path / "r")
    assert isinstance(loaded.codec, IdentityCodec)
    rows = torch.tensor([4999, 0, 17, 17, 2500])
    assert same_bits(loaded.codec.decode(loaded.index_select(rows)), x[rows])
    assert same_bits(loaded.decode_rows(torch.arange(ROWS)), x)


def test_ebp_store_in_memory_and_sparse_rows(tmp_path):
    x = make_family("binary_bow", 3000)  # mostly zeros: EBP's sparse mode
    table = EncodedTable.encode(x, "ebp")
    assert table.codec.sparse and table.fraction < 0.1
    table.save(tmp_path / "s")
    loaded = EncodedTable.load(tmp_path / "s")
    assert loaded.codec.sparse and loaded.codec.fingerprint == table.codec.fingerprint
    rows = torch.randint(0, 3000, (400,), generator=torch.Generator().manual_seed(2))
    assert same_bits(loaded.codec.decode(loaded.index_select(rows)), x[rows])


def test_ebp_codec_survives_pickling(emb):
    """DataLoader workers started with spawn/forkserver receive codecs pickled."""
    codec = EncodedTable.encode(emb[:2000], "ebp").codec
    clone = pickle.loads(pickle.dumps(codec))
    assert clone.fingerprint == codec.fingerprint
    ct = codec.encode(emb[:300])
    assert same_bits(clone.decode(ct), emb[:300])
    assert torch.equal(clone.encode(emb[:300]).payload, ct.payload)


def test_bad_codec_and_damaged_folders_are_named(tmp_path, emb):
    with pytest.raises(ValueError, match=r"codec='zstd' is not accepted; use one of \('auto', 'ibp', 'ebp', "
                                         r"'identity'\)"):
        EncodedTable.encode(emb, "zstd")
    with pytest.raises(ValueError, match=r"codec=None is not accepted"):
        EncodedTable.encode(emb, None)
    EncodedTable.encode(emb, "ebp", directory=tmp_path / "e")
    (tmp_path / "e" / "offsets.npy").unlink()
    with pytest.raises(FileNotFoundError, match="missing offsets.npy .*ebp"):
        EncodedTable.load(tmp_path / "e")
    EncodedTable.encode(random_bits(), "identity", directory=tmp_path / "i")
    payload = tmp_path / "i" / "payload.bin"
    payload.write_bytes(payload.read_bytes()[:1000])
    with pytest.raises(CorruptPayloadError, match="truncated"):
        EncodedTable.load(tmp_path / "i")


def test_saving_identity_over_an_older_table_drops_its_offsets(tmp_path, emb):
    EncodedTable.encode(emb, "ibp", directory=tmp_path / "t")
    assert (tmp_path / "t" / "offsets.npy").exists()
    EncodedTable.encode(emb, "identity").save(tmp_path / "t")
    loaded = EncodedTable.load(tmp_path / "t")
    assert isinstance(loaded.codec, IdentityCodec) and not (tmp_path / "t" / "offsets.npy").exists()
    assert np.array_equal(loaded.decode_rows(torch.arange(10)).numpy(), emb[:10].numpy())


def test_a_folder_of_a_users_files_of_a_stores_names_is_refused_and_kept(tmp_path, emb):
    """save and encode(directory=) write meta.json, payload.bin, offsets.npy, codec.bin and checksums.json (and
    delete offsets.npy for the identity codec): into a folder that holds such files but no store (a user's notes,
    a prepared folder's meta.json) they are refused, every file kept; a store's own folder is written again."""
    from ibp_graph.files import OutputFolderError

    table = EncodedTable.encode(emb[:100], "identity", progress=False)
    d = tmp_path / "mine"
    d.mkdir()
    (d / "meta.json").write_text('{"notes": "mine"}')
    (d / "offsets.npy").write_bytes(b"mine")
    for write in (lambda: table.save(d), lambda: EncodedTable.encode(emb[:100], "ibp", directory=d, progress=False)):
        with pytest.raises(OutputFolderError, match=rf"^directory='{d}' is not accepted: it holds meta.json, "
                                                    r"offsets.npy but no encoded table .*nothing was written"):
            write()
        assert sorted(p.name for p in d.iterdir()) == ["meta.json", "offsets.npy"]
        assert (d / "meta.json").read_text() == '{"notes": "mine"}' and (d / "offsets.npy").read_bytes() == b"mine"
    (d / "notes.txt").write_text("mine")  # no name of a store's: written beside it
    (d / "meta.json").unlink()
    (d / "offsets.npy").unlink()
    table.save(d)
    EncodedTable.encode(emb[:100], "ibp", directory=d, progress=False)  # over its own store: replaced
    assert (d / "notes.txt").read_text() == "mine" and EncodedTable.load(d).codec.name == "ibp"


def test_a_store_saved_into_the_current_folder_or_onto_a_file(tmp_path, emb, monkeypatch):
    """save / encode(directory=) take "." (the work folder is named after the folder's absolute path; "." has no
    name of its own), and a file as the folder is refused by name before any encoding, the file kept."""
    from ibp_graph.files import OutputFolderError

    table = EncodedTable.encode(emb[:100], "ibp", progress=False)
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    for write in (lambda d: table.save(d), lambda d: EncodedTable.encode(emb[:100], "ibp", directory=d,
                                                                        progress=False)):
        write(".")
        assert same_bits(EncodedTable.load(".", verify="full").decode_rows(torch.arange(100)), emb[:100])
        assert sorted(p.name for p in tmp_path.iterdir()) == ["here"]  # no work folder left
        f = tmp_path / "notes.txt"
        f.write_text("mine")
        with pytest.raises(OutputFolderError, match=rf"^directory='{f}' is not accepted: it is a file; nothing was "
                                                    "written"):
            write(f)
        assert f.read_text() == "mine"
        f.unlink()


def test_a_store_saved_through_a_symlink_to_another_file_system(tmp_path, emb):
    """A store folder that is a symlink to another file system (a data disk) takes save / encode(directory=): the
    work folder lies beside the folder the files land in, since a rename cannot cross file systems."""
    import os
    import tempfile

    other = Path("/dev/shm")
    if not other.is_dir() or other.stat().st_dev == tmp_path.stat().st_dev or not os.access(other, os.W_OK):
        pytest.skip("no writable /dev/shm on another file system than tmp_path")
    with tempfile.TemporaryDirectory(dir=other) as target:
        link = tmp_path / "store"
        link.symlink_to(target, target_is_directory=True)
        EncodedTable.encode(emb[:100], "ibp", progress=False).save(link)
        assert same_bits(EncodedTable.load(link, verify="full").decode_rows(torch.arange(100)), emb[:100])
        EncodedTable.encode(emb[:50], "identity", directory=link, progress=False)
        assert same_bits(EncodedTable.load(link, verify="full").decode_rows(torch.arange(50)), emb[:50])
        assert sorted(p.name for p in tmp_path.iterdir()) == ["store"]
        assert sorted(p.name for p in Path(target).parent.iterdir() if p.name.startswith(Path(target).name)) == \
            [Path(target).name]  # no work folder left beside the target either


def test_a_store_folder_that_is_a_mount_point_is_refused_before_encoding(tmp_path, emb):
    """A mount point (a data disk, a container volume) as the store folder: the work folder beside it would lie on
    another file system, so the move at the end would fail after the whole encode; it is refused up front, also
    through a symlink."""
    from ibp_graph.files import OutputFolderError

    mount = Path("/dev/shm")
    if not os.path.ismount(mount):
        pytest.skip("/dev/shm is not a mount point here")
    link = tmp_path / "store"
    link.symlink_to(mount, target_is_directory=True)
    table = EncodedTable.encode(emb[:10], "ibp", progress=False)
    before = sorted(os.listdir(mount))
    for write in (lambda d: table.save(d), lambda d: EncodedTable.encode(emb[:10], "ibp", directory=d,
                                                                        progress=False)):
        for d in (mount, link):
            with pytest.raises(OutputFolderError, match=rf"^directory='{d}' is not accepted: it is a mount point, "
                                                        r".*nothing was written: pass a folder inside it$"):
                write(d)
    assert sorted(os.listdir(mount)) == before


@pytest.mark.parametrize("via", ["save", "encode"])
def test_a_store_saved_over_another_and_interrupted_leaves_the_old_one_loadable(tmp_path, emb, monkeypatch, via):
    """save / encode(directory=) write every file in a work folder beside the store and move them in at the end:
    interrupted before (here: in codec.bin's write, after the payload), the old store loads as it was, bit for
    bit, and no work folder is left; uninterrupted, the new one replaces it (its memory map valid)."""
    import ibp_graph.data.store as store

    d = tmp_path / "t"
    old = EncodedTable.encode(emb, "ibp", directory=d, progress=False)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    real = store.write_bytes

    def interrupted(path, data):
        raise KeyboardInterrupt("interrupted while writing codec.bin")

    monkeypatch.setattr(store, "write_bytes", interrupted)
    with pytest.raises(KeyboardInterrupt):
        if via == "save":
            EncodedTable.encode(emb[:50], "identity", progress=False).save(d)
        else:
            EncodedTable.encode(emb[:50], "identity", directory=d, progress=False)
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]  # the work folder went
    loaded = EncodedTable.load(d, verify="full")
    assert loaded.shape == old.shape and np.array_equal(loaded.decode_rows(torch.arange(20)).numpy(), emb[:20].numpy())
    monkeypatch.setattr(store, "write_bytes", real)
    new = EncodedTable.encode(emb[:50], "identity", progress=False).save(d) if via == "save" else \
        EncodedTable.encode(emb[:50], "identity", directory=d, progress=False)
    loaded = EncodedTable.load(d, verify="full")
    assert loaded.shape == (50,) + tuple(emb.shape[1:]) and not (d / "offsets.npy").exists()
    assert np.array_equal(loaded.decode_rows(torch.arange(50)).numpy(), emb[:50].numpy())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]
    if via == "encode":  # the returned table's map reads the file now in `d`
        assert np.array_equal(new.decode_rows(torch.arange(50)).numpy(), emb[:50].numpy())


@pytest.mark.parametrize("name", ["identity", "ibp", "ebp"])
def test_a_table_from_a_codecs_own_encode_saves_and_loads(tmp_path, emb, name):
    """Not only EncodedTable.encode's chunked payload: a codec's whole-table encode (identity: no tail padding)."""
    from ibp_graph.codec.auto import fit_named

    codec = fit_named(emb[:500], name, argname="codec")
    EncodedTable(codec, codec.encode(emb[:500])).save(tmp_path / "t")
    assert same_bits(EncodedTable.load(tmp_path / "t", verify="full").decode_rows(torch.arange(500)), emb[:500])
