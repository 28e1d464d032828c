"""Seeded synthetic node-feature tables that imitate how public graph data sets built theirs.

Seven families (see ``FAMILIES``) feed codec tests, benchmarks and the default data set.
Each imitates a *recipe* (averaged word vectors, PCA of a bag of words, TF-IDF, binary
bag of words, node ids, random bits) rather than copying statistics, so that the bit
patterns a compressor sees are the ones the real recipe produces.

Contract shared by every generator:

* **Deterministic.** The bits depend only on the arguments; different seeds give
  different data. They also do not depend on thread counts or summation order, with
  one measured exception: ``pca_bow``'s PCA fit goes through LAPACK, whose last bits
  change with the BLAS thread count or CPU, and about 1 value in 10^6 of the table then
  differs by one float32 ulp. (Across CPUs, libm-level float64 steps such as ``log``
  and ``exp`` may in principle flip a rare last bit of the float families too.)
* **Prefix-stable.** Rows are produced in fixed chunks of ``CHUNK_ROWS`` rows, each
  from its own random stream keyed by (family, chunk index, seed), so the first ``m``
  rows of a table do not depend on how many rows were asked for.
* **Bounded memory.** Work space is per chunk: memory is the output plus O(chunk) plus
  the cached per-seed models (at most two 30 MB embedding vocabularies, small fits).
* The result is a contiguous CPU ``torch.Tensor`` of shape ``(n_rows, dim)``;
  ``n_rows == 0`` gives an empty tensor of that trailing shape and dtype.
"""
from __future__ import annotations

import functools
import math
import operator
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

__all__ = [
    "CHUNK_ROWS",
    "FAMILIES",
    "PAPERS100M_NUM_NODES",
    "averaged_embeddings",
    "binary_bow",
    "make_family",
    "node_ids",
    "pca_bow",
    "random_bits",
    "tfidf",
]

FAMILIES: tuple[str, ...] = (
    "embedding_f32",
    "embedding_f16",
    "pca_bow",
    "tfidf",
    "binary_bow",
    "node_ids_i64",
    "random_bits",
)
"""Names accepted by :func:`make_family`, in a fixed order."""

CHUNK_ROWS = 8192
"""Rows generated per random stream; fixed so that tables are prefix-stable."""

PAPERS100M_NUM_NODES = 111_059_956
"""Number of nodes of ogbn-papers100M, the id range of the ``node_ids_i64`` family."""

# Stream keys: every random stream is SeedSequence([family, purpose, index, seed]).
_EMBEDDING, _PCA_BOW, _TFIDF, _BINARY_BOW, _NODE_IDS, _RANDOM_BITS = range(1, 7)
_TOPIC_SET, _VOCAB, _COLUMNS, _VALUES = range(100, 104)


class _Streams(NamedTuple):
    """Purposes of the streams that draw documents (a table's rows or a fitting sample)."""

    lengths: int      # words (or distinct words) per document, one stream per chunk
    words: int        # the word draws, one stream per chunk
    redraw: int       # a document whose draws ran short, one stream per row
    classes: int      # latent class per document (pca_bow), one stream per chunk
    topic_draws: int  # which words come from the class's topic words, one stream per chunk


_TABLE = _Streams(0, 1, 2, 3, 4)
_FIT = _Streams(10, 11, 12, 13, 14)

# Word frequencies: Zipf-Mandelbrot, p(rank r) ~ 1 / (r + shift).
_ZIPF_SHIFT_TEXT = 2.7     # running text with its frequent words (titles, abstracts)
_ZIPF_SHIFT_VOCAB = 10.0   # curated vocabularies (stop words and rare words removed)

# Averaged embeddings (ogbn-papers100M).
_EMB_LEN_MEDIAN, _EMB_LEN_SIGMA, _EMB_LEN_RANGE = 70.0, 0.5, (20, 200)
_EMB_GRID_BITS = 30        # word vectors are multiples of 2^-30: exact float64 sums
_TOPIC_WORDS = 64          # topic words per class
_TOPIC_MIN_RANK = 100      # topic words are content words: never among the 100 most frequent

# PCA of a bag of words (ogbn-products).
_PCA_LEN_MEDIAN, _PCA_LEN_SIGMA, _PCA_LEN_RANGE = 40.0, 0.6, (5, 300)
_PCA_CATEGORIES = 47       # ogbn-products' number of product categories
_PCA_TOPIC_FRACTION = 0.3
_PCA_FIT_ROWS = 512

# TF-IDF (PubMed).
_TFIDF_FIT_ROWS = 4096


# ----------------------------------------------------------------------------------
# Public API


def make_family(name: str, n_rows: int, *, seed: int = 0) -> torch.Tensor:
    """Generate ``n_rows`` rows of the named family (one of ``FAMILIES``) with its defaults."""
    try:
        make = _DISPATCH[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"name={name!r} is not a synthetic family; expected one of {', '.join(FAMILIES)}"
        ) from None
    return make(n_rows, seed)


def averaged_embeddings(
    n_rows: int,
    dim: int = 128,
    *,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    vocab_size: int = 30_000,
    labels: torch.Tensor | np.ndarray | Sequence[int] | None = None,
    topic_fraction: float = 0.2,
) -> torch.Tensor:
    """Averaged word vectors like ogbn-papers100M (``embedding_f32`` / ``embedding_f16``).

    Recipe: a vocabulary of ``vocab_size`` word vectors is drawn once per seed, word2vec
    style: ``w = mu + scale * z`` with ``z`` standard normal, a per-dimension offset
    ``mu[d] ~ N(0, 0.05^2)`` and a per-dimension scale ``scale[d] = 0.3 * exp(0.25 * N(0, 1))``,
    rounded to multiples of 2^-30 so that float64 sums of them are exact. Word *ranks* follow Zipf-Mandelbrot frequencies ``p(r) ~ 1 / (r + 2.7)``. Each row is a
    title plus abstract of ``k`` words, ``k = round(LogNormal(median 70, sigma 0.5))``
    clipped to [20, 200], drawn independently with those frequencies; the row is the
    mean of its ``k`` word vectors, summed in float64 and rounded once to ``dtype``
    (float16, float32 or float64), so the values look like real averaged embeddings.

    Class signal: with ``labels`` (one non-negative integer class per row) each class
    ``c`` owns ``64`` topic words (content words, never among the 100 most frequent,
    drawn once per seed and class), and each of a row's words is, with probability
    ``topic_fraction``, replaced by a uniformly chosen topic word of the row's class.
    Class means then differ, so a classifier can learn the labels (a nearest-centroid
    classifier on 10 classes is far above chance); ``topic_fraction=0`` or
    ``labels=None`` gives rows with no class signal. A class's topic words do not
    depend on which other classes occur.
    """
    n_rows = _check_n_rows(n_rows)
    dim = _check_int("dim", dim, minimum=1)
    seed = _check_seed(seed)
    vocab_size = _check_int("vocab_size", vocab_size, minimum=2)
    np_dtype = _check_float_dtype(dtype)
    topic_fraction = _check_fraction("topic_fraction", topic_fraction)
    label_array = _check_labels(labels, n_rows)
    if label_array is not None and vocab_size < _TOPIC_MIN_RANK + _TOPIC_WORDS:
        raise ValueError(
            f"vocab_size={vocab_size} is too small for labels; expected at least "
            f"{_TOPIC_MIN_RANK + _TOPIC_WORDS} words (topic words avoid the "
            f"{_TOPIC_MIN_RANK} most frequent)"
        )
    classes = topics = None
    if label_array is not None and n_rows > 0 and topic_fraction > 0.0:
        classes = np.unique(label_array)
        topics = np.stack([_topic_words(_EMBEDDING, seed, int(c), vocab_size) for c in classes])

    def fill(out: np.ndarray, start: int, chunk: int) -> None:
        rows = out.shape[0]
        lengths = _lognormal_lengths(_rng(_EMBEDDING, _TABLE.lengths, chunk, seed), rows,
                                     _EMB_LEN_MEDIAN, _EMB_LEN_SIGMA, _EMB_LEN_RANGE)
        words = _zipf_ranks(_rng(_EMBEDDING, _TABLE.words, chunk, seed).random(int(lengths.sum())),
                            vocab_size, _ZIPF_SHIFT_TEXT)
        if topics is not None:
            row_topics = topics[np.searchsorted(classes, label_array[start:start + rows])]
            _mix_topics(words, lengths, row_topics, topic_fraction,
                        _rng(_EMBEDDING, _TABLE.topic_draws, chunk, seed))
        sums = _sum_rows(lengths, words, _word_vectors(seed, vocab_size, dim))
        sums /= lengths[:, None]
        out[...] = sums  # the single rounding float64 -> dtype

    return _generate(n_rows, dim, np_dtype, fill)


def pca_bow(
    n_rows: int,
    dim: int = 100,
    *,
    seed: int = 0,
    vocab_size: int = 3000,
) -> torch.Tensor:
    """PCA of a bag of words like ogbn-products: ``dim``-d float32 (``pca_bow``).

    Recipe: documents (product descriptions) of ``round(LogNormal(median 40, sigma
    0.6))`` words clipped to [5, 300], words drawn from a ``vocab_size``-word vocabulary
    with Zipf-Mandelbrot frequencies ``p(r) ~ 1 / (r + 2.7)``, counted into a bag of
    words. Each document has a latent product category (uniform over 47, like
    ogbn-products) and each of its words is, with probability 0.3, one of the category's
    64 topic words instead, so words co-occur and the principal components mix many
    words (without categories they would be nearly the most frequent words' axes).
    A PCA is fitted once per seed on 512 such documents (a separate stream): centre
    the counts and take the top ``dim`` principal axes, computed exactly from the
    eigendecomposition of the sample's 512 x 512 Gram matrix (``numpy.linalg.eigh``;
    the same axes as an SVD of the sample, several times cheaper), sign fixed so each
    axis's largest loading is positive. Every row is its centred count vector projected
    on those axes, in float64, rounded to float32. The categories are not returned.
    """
    n_rows = _check_n_rows(n_rows)
    seed = _check_seed(seed)
    vocab_size = _check_int("vocab_size", vocab_size, minimum=_TOPIC_MIN_RANK + _TOPIC_WORDS)
    dim = _check_int("dim", dim, minimum=1)
    max_dim = min(vocab_size, _PCA_FIT_ROWS - 1)  # the rank of the centred fitting sample
    if dim > max_dim:
        raise ValueError(
            f"dim={dim} exceeds the number of principal components; expected at most "
            f"min(vocab_size, {_PCA_FIT_ROWS - 1}) = {max_dim}"
        )
    def fill(out: np.ndarray, start: int, chunk: int) -> None:
        components, offset = _pca_basis(seed, vocab_size, dim)  # fitted on first use
        lengths, words = _bow_documents(seed, chunk, out.shape[0], vocab_size, _TABLE)
        proj = _sum_rows(lengths, words, components)
        proj -= offset
        out[...] = proj

    return _generate(n_rows, dim, np.dtype(np.float32), fill)


def tfidf(n_rows: int, dim: int = 500, *, seed: int = 0, nnz: tuple[int, int] = (20, 80)) -> torch.Tensor:
    """Sparse TF-IDF like PubMed: ``dim``-d float32, L2-normalised rows (``tfidf``).

    Recipe: the vocabulary is the ``dim`` columns (a curated vocabulary: Zipf-Mandelbrot
    frequencies ``p(r) ~ 1 / (r + 10)``, ranks mapped to columns by a seeded
    permutation). A row wants ``m`` distinct words, ``m = round(N(mean, sd))`` clipped to
    ``nnz = (lo, hi)`` with mean ``(lo + hi) / 2`` and sd ``(hi - lo) / 6`` (default: about
    50 nonzeros, never fewer than 20 nor more than 80). Words are drawn one by one and the
    document is the shortest prefix holding ``m`` distinct words, so term frequencies
    ``tf`` are the repeat counts. ``idf = ln((1 + N) / (1 + df)) + 1`` (scikit-learn's
    smooth idf) is fitted once per seed on ``N = 4096`` such documents. Each row is
    ``tf * idf`` scaled to unit L2 norm in float64, rounded to float32; every other entry
    is exactly 0.0.
    """
    n_rows, seed, dim, lo, hi = _check_word_sets(n_rows, seed, dim, "nnz", nnz)
    def fill(out: np.ndarray, start: int, chunk: int) -> None:
        idf = _tfidf_idf(seed, dim, lo, hi)  # fitted on first use
        weights = idf * _distinct_prefix_counts(_TFIDF, seed, chunk, out.shape[0], dim, lo, hi,
                                                _column_permutation(_TFIDF, seed, dim))
        weights /= np.sqrt(np.einsum("ij,ij->i", weights, weights))[:, None]
        out[...] = weights

    return _generate(n_rows, dim, np.dtype(np.float32), fill)


def binary_bow(n_rows: int, dim: int = 3000, *, seed: int = 0, ones: tuple[int, int] = (20, 40)) -> torch.Tensor:
    """Binary bag of words like CiteSeer/Cora: ``dim``-d float32 of 0.0/1.0 (``binary_bow``).

    Recipe: the vocabulary is the ``dim`` columns with ``tfidf``'s frequencies (ranks mapped
    to columns by this family's own seeded permutation). A row holds ``m`` distinct words,
    ``m`` uniform in ``ones = (lo, hi)`` (default 20 to 40), the first ``m`` distinct words
    of a stream of draws with those frequencies; their columns are 1.0, all others 0.0.
    """
    n_rows, seed, dim, lo, hi = _check_word_sets(n_rows, seed, dim, "ones", ones)
    def fill(out: np.ndarray, start: int, chunk: int) -> None:
        columns = _column_permutation(_BINARY_BOW, seed, dim)
        rows, words = _distinct_prefix_words(_BINARY_BOW, seed, chunk, out.shape[0], dim, lo, hi)
        out[rows, columns[words]] = 1.0

    return _generate(n_rows, dim, np.dtype(np.float32), fill)


def node_ids(
    n_rows: int,
    dim: int = 32,
    *,
    seed: int = 0,
    num_nodes: int = PAPERS100M_NUM_NODES,
) -> torch.Tensor:
    """Int64 node ids of a large graph, uniform in [0, num_nodes) (``node_ids_i64``).

    Recipe: independent uniform integers; the default range is ogbn-papers100M's
    111_059_956 nodes, so the high bits of every int64 are zero (what a compressor of
    index tables sees).
    """
    n_rows = _check_n_rows(n_rows)
    seed = _check_seed(seed)
    dim = _check_int("dim", dim, minimum=1)
    num_nodes = _check_int("num_nodes", num_nodes, minimum=1)

    def fill(out: np.ndarray, start: int, chunk: int) -> None:
        out[...] = _rng(_NODE_IDS, _VALUES, chunk, seed).integers(
            0, num_nodes, size=out.shape, dtype=np.int64)

    return _generate(n_rows, dim, np.dtype(np.int64), fill)


def random_bits(n_rows: int, dim: int = 128, *, seed: int = 0) -> torch.Tensor:
    """Uniformly random 32-bit patterns viewed as float32 (``random_bits``).

    Recipe: uniform random int32 words reinterpreted as float32: about 1 in 256 values is
    a NaN (arbitrary payloads and signs) and 1 in 256 a subnormal; infinities and zeros
    occur with their uniform odds (2 of 2^32 patterns each), i.e. almost never. The
    incompressible baseline: a lossless codec must round-trip it bit for bit.
    """
    n_rows = _check_n_rows(n_rows)
    seed = _check_seed(seed)
    dim = _check_int("dim", dim, minimum=1)

    def fill(out: np.ndarray, start: int, chunk: int) -> None:
        out.view(np.uint32)[...] = _rng(_RANDOM_BITS, _VALUES, chunk, seed).integers(
            0, 1 << 32, size=out.shape, dtype=np.uint32)

    return _generate(n_rows, dim, np.dtype(np.float32), fill)


_DISPATCH: dict[str, Callable[[int, int], torch.Tensor]] = {
    "embedding_f32": lambda n, s: averaged_embeddings(n, dtype=torch.float32, seed=s),
    "embedding_f16": lambda n, s: averaged_embeddings(n, dtype=torch.float16, seed=s),
    "pca_bow": lambda n, s: pca_bow(n, seed=s),
    "tfidf": lambda n, s: tfidf(n, seed=s),
    "binary_bow": lambda n, s: binary_bow(n, seed=s),
    "node_ids_i64": lambda n, s: node_ids(n, seed=s),
    "random_bits": lambda n, s: random_bits(n, seed=s),
}
assert tuple(_DISPATCH) == FAMILIES


# ----------------------------------------------------------------------------------
# Chunked generation and random streams


def _generate(n_rows: int, dim: int, dtype: np.dtype,
              fill: Callable[[np.ndarray, int, int], None]) -> torch.Tensor:
    """Allocate the (n_rows, dim) output once and fill it chunk by chunk."""
    out = np.zeros((n_rows, dim), dtype=dtype)
    for chunk, start in enumerate(range(0, n_rows, CHUNK_ROWS)):
        fill(out[start:start + CHUNK_ROWS], start, chunk)
    return torch.from_numpy(out)


def _rng(family: int, purpose: int, index: int, seed: int) -> np.random.Generator:
    """The random stream of one (family, purpose, index) under ``seed``."""
    return np.random.default_rng(np.random.SeedSequence([family, purpose, index, seed]))


def _zipf_ranks(u: np.ndarray, vocab_size: int, shift: float) -> np.ndarray:
    """Word ranks with p(r) ~ 1/(r + shift), from uniforms ``u`` by the inverse CDF."""
    # The continuous density 1/(x + shift) on [0, V) has CDF log1p(x/shift)/log1p(V/shift);
    # flooring its inverse gives P(r) = log((r + 1 + shift) / (r + shift)) / log1p(V/shift).
    ranks = np.floor(shift * np.expm1(u * math.log1p(vocab_size / shift)))
    np.minimum(ranks, vocab_size - 1, out=ranks)
    return ranks.astype(np.int16 if vocab_size <= np.iinfo(np.int16).max else np.int32)


def _lognormal_lengths(rng: np.random.Generator, n: int, median: float, sigma: float,
                       bounds: tuple[int, int]) -> np.ndarray:
    """Document lengths: round(LogNormal(median, sigma)) clipped to ``bounds``."""
    lengths = np.rint(rng.lognormal(math.log(median), sigma, n))
    return np.clip(lengths, bounds[0], bounds[1]).astype(np.int64)


def _sum_rows(lengths: np.ndarray, words: np.ndarray, table: torch.Tensor) -> np.ndarray:
    """Row r = sum of ``table[w]`` over its ``lengths[r]`` words ``w``, in float64.

    One sparse (rows x vocabulary) CSR product with repeated columns, so no
    (rows x words x dim) gather is materialised. The kernel picks the summation order:
    tables whose sums are exact (the word vectors) give order-independent bits.
    """
    crow = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=crow[1:])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
        matrix = torch.sparse_csr_tensor(
            torch.from_numpy(crow), torch.from_numpy(words.astype(np.int64)),
            torch.ones(len(words), dtype=torch.float64),
            size=(len(lengths), table.shape[0]), check_invariants=False)
        return (matrix @ table).numpy()


def _mix_topics(words: np.ndarray, lengths: np.ndarray, row_topics: np.ndarray,
                fraction: float, rng: np.random.Generator) -> None:
    """Replace each word, with probability ``fraction``, by one of its row's topic words."""
    u = rng.random(len(words))
    is_topic = u < fraction
    # Given u < fraction, u / fraction is uniform on [0, 1): it also picks the topic word.
    n_topics = row_topics.shape[1]
    pick = np.minimum((u[is_topic] * (n_topics / fraction)).astype(np.int64), n_topics - 1)
    word_row = np.repeat(np.arange(len(lengths)), lengths)
    words[is_topic] = row_topics[word_row[is_topic], pick]


# ----------------------------------------------------------------------------------
# Per-seed models (cached: they are fitted once and shared by all chunks and calls)


@functools.lru_cache(maxsize=2)
def _word_vectors(seed: int, vocab_size: int, dim: int) -> torch.Tensor:
    """The (vocab_size, dim) float64 word vectors of the embedding family (read only).

    Normals are clipped to +-8 and the vectors rounded to multiples of 2^-30, so every
    |w| < 2^5 and any sum of up to 2^8 of them is exact in float64: a row's mean does not
    depend on summation order, threads or CPU (sparse kernels may sum in any order).
    """
    rng = _rng(_EMBEDDING, _VOCAB, 0, seed)
    mu = 0.05 * np.clip(rng.standard_normal(dim), -8.0, 8.0)
    scale = 0.3 * np.exp(0.25 * np.clip(rng.standard_normal(dim), -8.0, 8.0))
    vectors = mu + scale * np.clip(rng.standard_normal((vocab_size, dim)), -8.0, 8.0)
    return torch.from_numpy(np.ldexp(np.rint(np.ldexp(vectors, _EMB_GRID_BITS)), -_EMB_GRID_BITS))


def _topic_words(family: int, seed: int, label: int, vocab_size: int) -> np.ndarray:
    """The topic words (ranks) of class ``label``: content words, never the most frequent."""
    rng = _rng(family, _TOPIC_SET, label, seed)
    return _TOPIC_MIN_RANK + rng.choice(vocab_size - _TOPIC_MIN_RANK, _TOPIC_WORDS,
                                        replace=False)


@functools.lru_cache(maxsize=4)
def _category_topics(seed: int, vocab_size: int) -> np.ndarray:
    """(categories, topic words) table of the pca_bow family."""
    return np.stack([_topic_words(_PCA_BOW, seed, c, vocab_size) for c in range(_PCA_CATEGORIES)])


def _bow_documents(seed: int, chunk: int, n: int, vocab_size: int,
                   streams: _Streams) -> tuple[np.ndarray, np.ndarray]:
    """Lengths and word ranks (row after row) of ``n`` pca_bow documents."""
    lengths = _lognormal_lengths(_rng(_PCA_BOW, streams.lengths, chunk, seed), n,
                                 _PCA_LEN_MEDIAN, _PCA_LEN_SIGMA, _PCA_LEN_RANGE)
    u = _rng(_PCA_BOW, streams.words, chunk, seed).random(int(lengths.sum()))
    words = _zipf_ranks(u, vocab_size, _ZIPF_SHIFT_TEXT)
    category = _rng(_PCA_BOW, streams.classes, chunk, seed).integers(0, _PCA_CATEGORIES, n)
    _mix_topics(words, lengths, _category_topics(seed, vocab_size)[category],
                _PCA_TOPIC_FRACTION, _rng(_PCA_BOW, streams.topic_draws, chunk, seed))
    return lengths, words


@functools.lru_cache(maxsize=4)
def _pca_basis(seed: int, vocab_size: int, dim: int) -> tuple[torch.Tensor, np.ndarray]:
    """PCA of pca_bow counts: (vocab_size, dim) axes (read only) and the projected mean."""
    n = _PCA_FIT_ROWS
    lengths, words = _bow_documents(seed, 0, n, vocab_size, _FIT)
    counts = np.bincount(np.repeat(np.arange(n), lengths) * vocab_size + words,
                         minlength=n * vocab_size).reshape(n, vocab_size).astype(np.float64)
    mean = counts.mean(axis=0)
    counts -= mean
    # X = U S V^T  =>  X X^T = U S^2 U^T and V = X^T U / S: the SVD's axes from an
    # n x n eigenproblem instead of an n x vocab_size SVD.
    eigvals, eigvecs = np.linalg.eigh(counts @ counts.T)
    top = np.argsort(eigvals)[::-1][:dim]
    components = (counts.T @ eigvecs[:, top]) / np.sqrt(np.maximum(eigvals[top], 1e-300))
    strongest = np.abs(components).argmax(axis=0)
    components *= np.sign(components[strongest, np.arange(dim)])
    offset = mean @ components
    offset.flags.writeable = False
    return torch.from_numpy(components), offset


@functools.lru_cache(maxsize=8)
def _column_permutation(family: int, seed: int, dim: int) -> np.ndarray:
    """Column of each word rank: vocabularies are not sorted by frequency."""
    perm = _rng(family, _COLUMNS, 0, seed).permutation(dim)
    perm.flags.writeable = False
    return perm


@functools.lru_cache(maxsize=4)
def _tfidf_idf(seed: int, dim: int, lo: int, hi: int) -> np.ndarray:
    """Smooth idf of every column, fitted on a sample of documents."""
    n = _TFIDF_FIT_ROWS
    counts = _distinct_prefix_counts(_TFIDF, seed, 0, n, dim, lo, hi,
                                     _column_permutation(_TFIDF, seed, dim), _FIT)
    df = np.count_nonzero(counts, axis=0)
    idf = np.log((1.0 + n) / (1.0 + df)) + 1.0
    idf.flags.writeable = False
    return idf


# ----------------------------------------------------------------------------------
# Documents with a target number of distinct words (tfidf, binary_bow)


def _distinct_targets(family: int, seed: int, chunk: int, n: int, lo: int, hi: int,
                      streams: _Streams) -> np.ndarray:
    """Distinct words per row: normal around the middle (tfidf) or uniform (binary_bow)."""
    rng = _rng(family, streams.lengths, chunk, seed)
    if family == _TFIDF:
        sd = (hi - lo) / 6.0
        m = np.rint(rng.normal((lo + hi) / 2.0, sd if sd > 0 else 0.0, n))
        return np.clip(m, lo, hi).astype(np.int64)
    return rng.integers(lo, hi + 1, n)


def _distinct_prefix_words(family: int, seed: int, chunk: int, n: int, vocab_size: int,
                           lo: int, hi: int, streams: _Streams = _TABLE,
                           ) -> tuple[np.ndarray, np.ndarray]:
    """Row index and word rank of every draw of ``n`` documents (repeats included).

    A document is the shortest prefix of its word stream (Zipf-Mandelbrot, shift 10) that
    holds its target number of distinct words.
    """
    targets = _distinct_targets(family, seed, chunk, n, lo, hi, streams)
    draws = _initial_draws(hi, vocab_size)
    u = _rng(family, streams.words, chunk, seed).random((n, draws))
    words = _zipf_ranks(u, vocab_size, _ZIPF_SHIFT_VOCAB)
    keep, short = _prefix_mask(words, targets)
    rows, pos = np.nonzero(keep)
    row_parts, word_parts = [rows], [words[rows, pos]]
    for r in np.flatnonzero(short):  # rare: the draws ran out before m distinct words
        row_words = _redraw_document(family, streams.redraw, chunk * CHUNK_ROWS + int(r), seed,
                                     int(targets[r]), vocab_size, 4 * draws)
        row_parts.append(np.full(len(row_words), r))
        word_parts.append(row_words)
    return np.concatenate(row_parts), np.concatenate(word_parts)


def _distinct_prefix_counts(family: int, seed: int, chunk: int, n: int, vocab_size: int,
                            lo: int, hi: int, column_of_rank: np.ndarray,
                            streams: _Streams = _TABLE) -> np.ndarray:
    """(n, vocab_size) int64 term counts of ``n`` documents, word ranks put in their columns."""
    rows, words = _distinct_prefix_words(family, seed, chunk, n, vocab_size, lo, hi, streams)
    flat = np.bincount(rows * vocab_size + column_of_rank[words], minlength=n * vocab_size)
    return flat.reshape(n, vocab_size)


@functools.lru_cache(maxsize=16)
def _initial_draws(hi: int, vocab_size: int) -> int:
    """Draws per row that almost always hold ``hi`` distinct words (shift-10 Zipf).

    25 % (+16) above the draw count whose expected number of distinct words is ``hi``;
    a row that still runs short is redrawn (``_redraw_document``).
    """
    r = np.arange(vocab_size)
    shift = _ZIPF_SHIFT_VOCAB
    prob = np.log((r + 1 + shift) / (r + shift)) / math.log1p(vocab_size / shift)
    log_miss = np.log1p(-np.minimum(prob, 1.0 - 1e-12))  # log P(a draw misses word r)
    target = min(hi, vocab_size - 0.5)
    lo_n, hi_n = float(hi), float(hi)
    while -np.expm1(hi_n * log_miss).sum() < target:
        lo_n, hi_n = hi_n, 2.0 * hi_n
    for _ in range(40):
        mid = 0.5 * (lo_n + hi_n)
        lo_n, hi_n = (mid, hi_n) if -np.expm1(mid * log_miss).sum() < target else (lo_n, mid)
    return int(1.25 * hi_n) + 16


def _prefix_mask(words: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mask of the draws in each row's shortest prefix with ``targets`` distinct words.

    Also returns the rows whose draws hold fewer distinct words than their target.
    """
    order = np.argsort(words, axis=1, kind="stable")  # radix sort for int16
    sorted_words = np.take_along_axis(words, order, axis=1)
    first_sorted = np.ones(words.shape, dtype=bool)
    np.not_equal(sorted_words[:, 1:], sorted_words[:, :-1], out=first_sorted[:, 1:])
    first = np.empty_like(first_sorted)  # stable sort: a group's head is its earliest draw
    np.put_along_axis(first, order, first_sorted, axis=1)
    distinct = np.cumsum(first, axis=1, dtype=np.int32)
    keep = (distinct - first) < targets[:, None]
    short = distinct[:, -1] < targets
    keep[short] = False
    return keep, short


def _redraw_document(family: int, stream: int, row: int, seed: int, target: int,
                     vocab_size: int, draws: int) -> np.ndarray:
    """Word ranks of one document redrawn from the row's own stream, with more draws."""
    while True:
        u = _rng(family, stream, row, seed).random((1, draws))
        words = _zipf_ranks(u, vocab_size, _ZIPF_SHIFT_VOCAB)
        keep, short = _prefix_mask(words, np.array([target]))
        if not short[0]:
            return words[keep]
        draws *= 4


# ----------------------------------------------------------------------------------
# Argument checks (every error names the argument, the value and what is accepted)


def _check_int(arg: str, value: Any, *, minimum: int) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{arg}={value!r} must be an integer >= {minimum}, not a bool")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{arg}={value!r} must be an integer >= {minimum}") from None
    if value < minimum:
        raise ValueError(f"{arg}={value} is out of range; expected an integer >= {minimum}")
    return value


def _check_n_rows(n_rows: Any) -> int:
    return _check_int("n_rows", n_rows, minimum=0)


def _check_seed(seed: Any) -> int:
    return _check_int("seed", seed, minimum=0)


def _check_fraction(arg: str, value: Any) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{arg}={value!r} must be a number in [0, 1]") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{arg}={value} is out of range; expected a number in [0, 1]")
    return value


def _check_range(arg: str, value: Any, dim: int) -> tuple[int, int]:
    try:
        lo, hi = (operator.index(v) for v in value)
    except (TypeError, ValueError):
        raise TypeError(f"{arg}={value!r} must be a pair of integers (lo, hi)") from None
    if not 1 <= lo <= hi <= dim:
        raise ValueError(f"{arg}={value!r} is out of range; expected 1 <= lo <= hi <= dim={dim}")
    return lo, hi


def _check_word_sets(n_rows: Any, seed: Any, dim: Any, arg: str, counts: Any) -> tuple[int, int, int, int, int]:
    """n_rows, seed, dim and the (lo, hi) of `arg` (words per row) of a family whose rows are sets of distinct
    column words (tfidf, binary_bow), checked in that order."""
    n_rows, seed, dim = _check_n_rows(n_rows), _check_seed(seed), _check_int("dim", dim, minimum=1)
    return (n_rows, seed, dim) + _check_range(arg, counts, dim)


_FLOAT_DTYPES = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}


def _check_float_dtype(dtype: Any) -> np.dtype:
    if dtype not in _FLOAT_DTYPES:
        raise ValueError(
            f"dtype={dtype!r} is not supported; expected one of torch.float16, "
            "torch.float32, torch.float64"
        )
    return np.dtype(_FLOAT_DTYPES[dtype])


def _check_labels(labels: Any, n_rows: int) -> np.ndarray | None:
    if labels is None:
        return None
    array = labels.detach().cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if array.ndim != 1 or len(array) != n_rows:
        raise ValueError(
            f"labels has shape {tuple(array.shape)}; expected one label per row, ({n_rows},)"
        )
    if array.size and array.dtype.kind not in "iu":
        raise ValueError(f"labels has dtype {array.dtype}; expected integer class ids")
    array = array.astype(np.int64, copy=False)
    if array.size and array.min() < 0:
        raise ValueError(
            f"labels contains {int(array.min())}; expected non-negative integer class ids"
        )
    return array
