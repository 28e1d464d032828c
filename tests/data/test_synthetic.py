"""Synthetic feature families: shapes, determinism, and the statistics each recipe promises."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from ibp_graph.data import synthetic
from ibp_graph.data.synthetic import (
    FAMILIES,
    PAPERS100M_NUM_NODES,
    averaged_embeddings,
    binary_bow,
    make_family,
    node_ids,
    pca_bow,
    random_bits,
    tfidf,
)

# What each family must look like, written out independently of the module.
EXPECTED = {
    "embedding_f32": (128, torch.float32),
    "embedding_f16": (128, torch.float16),
    "pca_bow": (100, torch.float32),
    "tfidf": (500, torch.float32),
    "binary_bow": (3000, torch.float32),
    "node_ids_i64": (32, torch.int64),
    "random_bits": (128, torch.float32),
}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN payloads included)."""
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(
        a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def rows_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per row: are the two rows bit for bit equal?"""
    return (a.contiguous().view(torch.uint8) == b.contiguous().view(torch.uint8)).all(dim=1)


def clear_fitted_models() -> None:
    """Forget cached vocabularies and fits so that they are recomputed."""
    for obj in vars(synthetic).values():
        if hasattr(obj, "cache_clear"):
            obj.cache_clear()


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    """Shrink the generation chunk so that chunk boundaries are cheap to cross."""
    monkeypatch.setattr(synthetic, "CHUNK_ROWS", 64)
    return 64


# ----------------------------------------------------------------------------------
# Every family


def test_family_names_and_order() -> None:
    assert FAMILIES == tuple(EXPECTED)


@pytest.mark.parametrize("n_rows", [37, 0])
@pytest.mark.parametrize("name", FAMILIES)
def test_shape_dtype_and_layout(name: str, n_rows: int) -> None:
    dim, dtype = EXPECTED[name]
    x = make_family(name, n_rows)
    assert x.shape == (n_rows, dim)
    assert x.dtype == dtype
    assert x.device.type == "cpu"
    assert x.is_contiguous()


@pytest.mark.parametrize("name", FAMILIES)
def test_deterministic_for_a_seed(name: str) -> None:
    first = make_family(name, 50)
    clear_fitted_models()  # vocabularies and fits are redrawn: they must match too
    assert same_bits(make_family(name, 50), first)


@pytest.mark.parametrize("name", FAMILIES)
def test_seeds_give_different_data(name: str) -> None:
    a = make_family(name, 50, seed=0)
    b = make_family(name, 50, seed=1)
    assert rows_equal(a, b).sum() == 0


@pytest.mark.parametrize("name", FAMILIES)
def test_prefix_stable_across_chunks(name: str, small_chunks: int) -> None:
    """The first m rows do not depend on how many rows were asked for."""
    full = make_family(name, 3 * small_chunks + 5, seed=1)
    for m in (1, small_chunks - 1, small_chunks + 9, 3 * small_chunks):
        assert same_bits(make_family(name, m, seed=1), full[:m])


@pytest.mark.parametrize("name", FAMILIES)
def test_chunks_are_not_repeated(name: str, small_chunks: int) -> None:
    x = make_family(name, 2 * small_chunks)
    assert rows_equal(x[:small_chunks], x[small_chunks:]).sum() == 0


@pytest.mark.parametrize("name", FAMILIES)
def test_rows_differ(name: str) -> None:
    x = make_family(name, 200)
    assert len(torch.unique(x.view(torch.uint8), dim=0)) == 200


# ----------------------------------------------------------------------------------
# Averaged embeddings


def test_embeddings_round_once_from_float64() -> None:
    wide = averaged_embeddings(300, dtype=torch.float64, seed=2)
    assert same_bits(averaged_embeddings(300, dtype=torch.float32, seed=2), wide.float())
    # float16 is rounded straight from float64 (numpy), not through float32.
    direct = torch.from_numpy(wide.numpy().astype(np.float16))
    assert same_bits(averaged_embeddings(300, dtype=torch.float16, seed=2), direct)
    assert same_bits(make_family("embedding_f16", 300, seed=2), direct)


def test_embedding_sums_do_not_depend_on_order() -> None:
    """Word vectors are exactly summable: any kernel order gives the same bits."""
    table = synthetic._word_vectors(0, 30_000, 128)
    words = np.random.default_rng(0).integers(0, 30_000, (40, 200))
    lengths = np.full(40, 200)
    forward = synthetic._sum_rows(lengths, words.ravel(), table)
    backward = synthetic._sum_rows(lengths, words[:, ::-1].ravel(), table)
    gathered = table.numpy()[words].sum(axis=1)  # numpy's pairwise order
    assert np.array_equal(forward, backward) and np.array_equal(forward, gathered)


def test_embeddings_look_like_averaged_word_vectors() -> None:
    x = make_family("embedding_f32", 2000).double()
    assert torch.isfinite(x).all()
    # Averages of ~70 word vectors of scale ~0.3 shrink towards the mean...
    assert 0.02 < x.std().item() < 0.15
    assert x.abs().max().item() < 1.0
    # ...and share a common (frequent-word) component: the columns are not centred.
    column_means = x.mean(dim=0)
    assert column_means.abs().max().item() > 3 * (x.std(dim=0) / np.sqrt(len(x))).max().item()
    # The word vectors have per-dimension scales: column spreads are not all equal.
    spread = x.std(dim=0)
    assert spread.max() / spread.min() > 1.5


def nearest_centroid_accuracy(x: torch.Tensor, labels: torch.Tensor, n_train: int) -> float:
    """Fit class means on the first n_train rows, classify the rest."""
    x = x.double()
    classes = torch.unique(labels[:n_train])
    centroids = torch.stack([x[:n_train][labels[:n_train] == c].mean(dim=0) for c in classes])
    predicted = classes[torch.cdist(x[n_train:], centroids).argmin(dim=1)]
    return (predicted == labels[n_train:]).double().mean().item()


def test_labels_carry_a_learnable_class_signal() -> None:
    n, n_classes = 3000, 10
    labels = torch.from_numpy(np.random.default_rng(0).integers(0, n_classes, n))
    with_labels = averaged_embeddings(n, labels=labels, seed=4)
    without = averaged_embeddings(n, seed=4)
    assert nearest_centroid_accuracy(with_labels, labels, 2000) > 0.5  # chance is 0.1
    assert nearest_centroid_accuracy(without, labels, 2000) < 0.2


def test_labels_accept_sequences_and_only_change_labelled_rows() -> None:
    labels = [3, 1, 4, 1, 5, 9, 2, 6]
    as_tensor = averaged_embeddings(8, labels=torch.tensor(labels), seed=1)
    assert same_bits(averaged_embeddings(8, labels=np.array(labels), seed=1), as_tensor)
    assert same_bits(averaged_embeddings(8, labels=labels, seed=1), as_tensor)
    # Without topic words the labels change nothing.
    assert same_bits(averaged_embeddings(8, labels=labels, topic_fraction=0.0, seed=1),
                     averaged_embeddings(8, seed=1))
    # A class's topic words do not depend on which other classes are present.
    assert same_bits(averaged_embeddings(2, labels=[3, 1], seed=1), as_tensor[:2])


def test_class_signal_grows_with_topic_fraction() -> None:
    labels = torch.from_numpy(np.random.default_rng(1).integers(0, 10, 1000))
    accuracy = [nearest_centroid_accuracy(averaged_embeddings(1000, labels=labels, seed=2,
                                                              topic_fraction=f), labels, 600)
                for f in (0.05, 0.2, 1.0)]
    assert accuracy[0] < accuracy[1] < accuracy[2]
    assert accuracy[2] > 0.97  # rows made only of their class's 64 topic words


# ----------------------------------------------------------------------------------
# Bag-of-words families


def test_pca_bow_is_centred_and_ordered_by_variance() -> None:
    x = make_family("pca_bow", 4000).double()
    std = x.std(dim=0)
    assert (x.mean(dim=0).abs() < 0.15 * std).all()
    # Principal components come in decreasing variance (up to sampling noise).
    assert std[0] > std[10] > std[99]
    assert (std[:-10] >= 0.8 * std[10:]).all()
    # Dense real values, not the sparse counts they came from.
    assert (x != 0).double().mean() > 0.99


def test_tfidf_sparsity_and_norms() -> None:
    x = make_family("tfidf", 3000)
    nnz = (x != 0).sum(dim=1)
    assert nnz.min() >= 20 and nnz.max() <= 80
    assert 47 <= nnz.double().mean() <= 53
    assert torch.allclose(x.double().norm(dim=1), torch.ones(len(x), dtype=torch.float64),
                          atol=1e-6)
    assert (x >= 0).all()
    # Term weights vary: repeated words and idf give many distinct values per row.
    assert len(torch.unique(x[0][x[0] != 0])) > 5


def test_tfidf_idf_downweights_frequent_words() -> None:
    x = make_family("tfidf", 3000)
    present = x != 0
    df = present.double().mean(dim=0)
    mean_weight = (x.sum(dim=0) / present.sum(dim=0).clamp(min=1)).double()
    common, rare = df.argsort(descending=True)[:20], df.argsort()[100:120]
    assert mean_weight[common].mean() < mean_weight[rare].mean()


def test_tfidf_nnz_range_is_honoured() -> None:
    x = tfidf(500, dim=60, nnz=(7, 9), seed=5)
    nnz = (x != 0).sum(dim=1)
    assert nnz.min() >= 7 and nnz.max() <= 9


def test_binary_bow_sparsity_and_values() -> None:
    x = make_family("binary_bow", 3000)
    assert set(torch.unique(x).tolist()) == {0.0, 1.0}
    ones = x.sum(dim=1)
    assert ones.min() >= 20 and ones.max() <= 40
    assert 29 <= ones.mean() <= 31
    # Zipf word frequencies: a few columns are common, most are rare.
    freq = x.mean(dim=0).sort(descending=True).values
    assert freq[0] > 0.2
    assert freq[0] > 20 * freq[len(freq) // 2]
    # Frequent words are not simply the first columns.
    assert x[:, :10].mean() < 5 * x.mean()


def test_binary_bow_exact_word_count(small_chunks: int) -> None:
    # Every word of the vocabulary: some rows run out of draws and are redrawn alone.
    x = binary_bow(300, dim=50, ones=(50, 50), seed=1)
    assert (x == 1).all()
    x = tfidf(3 * small_chunks, dim=50, nnz=(50, 50), seed=1)
    assert ((x != 0).sum(dim=1) == 50).all()
    assert same_bits(tfidf(small_chunks + 7, dim=50, nnz=(50, 50), seed=1), x[:small_chunks + 7])
    x = binary_bow(300, dim=200, ones=(12, 12), seed=1)
    assert (x.sum(dim=1) == 12).all()


# ----------------------------------------------------------------------------------
# Node ids and random bits


def test_node_ids_in_range_and_uniform() -> None:
    x = make_family("node_ids_i64", 2000)
    assert x.min() >= 0 and x.max() < PAPERS100M_NUM_NODES
    mean = x.double().mean().item() / PAPERS100M_NUM_NODES
    assert abs(mean - 0.5) < 0.01  # 64k uniform draws: sd of the mean ~0.001
    assert x.max() > 0.999 * PAPERS100M_NUM_NODES
    assert node_ids(100, 4, num_nodes=3).unique().tolist() == [0, 1, 2]


def test_random_bits_look_uniform() -> None:
    x = make_family("random_bits", 400)
    words = x.view(torch.int32).numpy().view(np.uint32).ravel()
    n = len(words)
    bits = (words[:, None] >> np.arange(32, dtype=np.uint32)) & 1
    freq = bits.mean(axis=0)
    assert np.all(np.abs(freq - 0.5) < 5 * 0.5 / np.sqrt(n))
    # Float views of random bits: NaNs with many payloads, subnormals, both signs.
    nan = torch.isnan(x)
    assert abs(nan.double().mean().item() - 1 / 256) < 0.002
    assert len(np.unique(words[nan.numpy().ravel()])) > 100
    subnormal = (x != 0) & (x.abs() < torch.finfo(torch.float32).tiny)
    assert subnormal.any()
    assert (x < 0).any() and (x > 0).any()


# ----------------------------------------------------------------------------------
# Errors


def test_unknown_family_names_argument_value_and_choices() -> None:
    with pytest.raises(ValueError, match=r"name='papers'.*embedding_f32.*random_bits"):
        make_family("papers", 3)


@pytest.mark.parametrize("name", FAMILIES)
def test_negative_rows(name: str) -> None:
    with pytest.raises(ValueError, match=r"n_rows=-1.*>= 0"):
        make_family(name, -1)


@pytest.mark.parametrize(
    ("call", "error", "pattern"),
    [
        (lambda: make_family("tfidf", 2.5), TypeError, r"n_rows=2\.5"),
        (lambda: make_family("tfidf", True), TypeError, r"n_rows=True"),
        (lambda: make_family("tfidf", 3, seed=-2), ValueError, r"seed=-2"),
        (lambda: random_bits(3, 0), ValueError, r"dim=0"),
        (lambda: averaged_embeddings(3, dtype=torch.int32), ValueError, r"dtype=torch\.int32"),
        (lambda: averaged_embeddings(3, labels=[0, 1]), ValueError, r"labels.*\(2,\).*\(3,\)"),
        (lambda: averaged_embeddings(2, labels=[0.0, 1.0]), ValueError, r"labels.*float"),
        (lambda: averaged_embeddings(2, labels=[0, -1]), ValueError, r"labels.*-1"),
        (lambda: averaged_embeddings(2, topic_fraction=1.5), ValueError, r"topic_fraction=1\.5"),
        (lambda: averaged_embeddings(2, vocab_size=50, labels=[0, 1]), ValueError,
         r"vocab_size=50"),
        (lambda: pca_bow(3, dim=2000), ValueError, r"dim=2000.*511"),
        (lambda: pca_bow(3, vocab_size=10), ValueError, r"vocab_size=10"),
        (lambda: tfidf(3, nnz=(0, 5)), ValueError, r"nnz=\(0, 5\)"),
        (lambda: tfidf(3, dim=10, nnz=(5, 20)), ValueError, r"nnz=\(5, 20\).*dim=10"),
        (lambda: binary_bow(3, ones=(30, 20)), ValueError, r"ones=\(30, 20\)"),
        (lambda: binary_bow(3, ones=5), TypeError, r"ones=5"),
        (lambda: node_ids(3, num_nodes=0), ValueError, r"num_nodes=0"),
    ],
)
def test_bad_arguments_are_named(call, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        call()
