"""Output folders on a disk several hosts share: another host's temporaries are named, never deleted."""
import os
import re
import socket

import pytest

from ibp_graph.data import graphgen
from ibp_graph.data.graphgen import GraphSpec
from ibp_graph.data.prepared import PreparedDataset
from ibp_graph.data.shards import load_shard, write_shards
from ibp_graph.files import OutputFolderError


def test_another_hosts_temporaries_block_a_prepare_by_path_host_and_pid_and_are_kept(tmp_path):
    """A work folder and an atomic write's file that processes on other hosts left in a prepared folder (shared
    disk): preparing it again names each path, its host and pid, and what to do; nothing is deleted, since from
    here it cannot be told whether those processes still run. This host's dead ones count as its own."""
    spec = GraphSpec(num_nodes=300, avg_citations=3.0, dim=4)
    d = graphgen.generate(spec, tmp_path / "p", progress=False)
    work = d / "shards-2.tmp-node-b-4242"  # a host name with a '-'
    work.mkdir()
    (work / "shards.json").write_text("{}")
    half = d / "store" / "x" / "payload.bin.tmp-nodec-77"
    half.write_text("half")
    (d / f"meta.json.tmp-{socket.gethostname()}-{2**22 + 1}").write_text("{}")  # this host's, its pid gone
    with pytest.raises(OutputFolderError) as e:
        graphgen.generate(spec, d, progress=False)
    message = str(e.value)
    assert message.startswith(f"output folder {d} holds 2 temporaries that ibp-graph processes on other hosts are "
                              "writing or left behind: ")
    assert f"{work} (process 4242 on host 'node-b')" in message and f"{half} (process 77 on host 'nodec')" in message
    assert "it deletes none of them and nothing was changed: delete each one whose host has no ibp-graph process " \
           "still preparing into this folder (rm -r PATH), then run again" in message
    assert (work / "shards.json").is_file() and half.read_text() == "half"  # kept
    (d / "notes.txt").write_text("mine")
    with pytest.raises(OutputFolderError, match=r"; it also holds files ibp-graph did not write \(notes.txt\)"):
        graphgen.generate(spec, d, progress=False)
    # beside the shards folder, another host's work folder blocks nothing (and is left alone)
    write_shards(d, 2, progress=False)
    assert load_shard(d / "shards-2", 1)[0].n_rows == 150 and (work / "shards.json").is_file()
    for p in (d / "notes.txt", half, work / "shards.json"):
        p.unlink()
    os.rmdir(work)
    graphgen.generate(spec, d, progress=False)
    assert PreparedDataset.load(d).num_nodes == 300


def test_only_names_of_the_temporaries_form_count_as_another_hosts(tmp_path):
    spec = GraphSpec(num_nodes=300, avg_citations=3.0, dim=4)
    d = graphgen.generate(spec, tmp_path / "p", progress=False)
    for name in ("x.npy.tmp-backup", "x.npy.tmp-host-12a", "x.npy.tmp-42"):
        (d / name).write_text("keep")
        with pytest.raises(OutputFolderError, match=rf"holds files ibp-graph did not write \({re.escape(name)}\)"):
            graphgen.generate(spec, d, progress=False)
        (d / name).unlink()
