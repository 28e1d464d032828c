"""One sampler for both graph kinds (issue #20): the homogeneous sampler is the one-type case of the typed
one, and the sampling modules share kernels through public names only."""
from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import torch

import ibp_graph.sampling as sampling
from ibp_graph.sampling import CSCGraph, NeighborSampler
from ibp_graph.sampling.hetero import HeteroNeighborSampler

SAMPLING = Path(sampling.__file__).parent
SAMPLER_MODULES = ("neighbor", "hetero", "kernels")


def test_sampler_modules_import_no_private_names_of_each_other():
    for name in SAMPLER_MODULES:
        tree = ast.parse((SAMPLING / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module in SAMPLER_MODULES:
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"sampling/{name}.py imports private names of sampling/{node.module}.py: {private}"


def test_only_the_kernel_module_compiles_sampling_kernels():
    for name in ("neighbor", "hetero"):
        tree = ast.parse((SAMPLING / f"{name}.py").read_text())
        jitted = [f.name for f in tree.body if isinstance(f, ast.FunctionDef)
                  and any("njit" in ast.unparse(d) or "jit" in ast.unparse(d) for d in f.decorator_list)]
        assert not jitted, f"sampling/{name}.py compiles its own kernels: {jitted}"


def test_the_homogeneous_sampler_is_the_one_type_case_of_the_typed_sampler():
    rng = np.random.default_rng(0)
    ei = torch.from_numpy(np.stack([rng.integers(0, 80, 600), rng.integers(0, 80, 600)]))
    graph = CSCGraph.from_edge_index(ei, 80)
    seeds = torch.tensor([3, 9, 3, 40])
    for kw in ({}, {"replace": True}, {"disjoint": True}, {"induced": True}):
        typed = HeteroNeighborSampler({"v": 80}, {("v", "to", "v"): graph}, [4, 3], homogeneous=True, **kw)
        homo = NeighborSampler(graph, [4, 3], replace=kw.get("replace", False), disjoint=kw.get("disjoint", False),
                               subgraph_type="induced" if kw.get("induced") else "directional")
        for seed in (0, 5):
            a, b = typed.sample("v", seeds, seed=seed), homo.sample(seeds, seed=seed)
            e = ("v", "to", "v")
            assert torch.equal(a.node["v"], b.node) and torch.equal(a.edge[e], b.edge)
            assert torch.equal(a.row[e], b.row) and torch.equal(a.col[e], b.col)
