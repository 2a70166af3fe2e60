"""Tests of trainables.metrics.retrieval_metrics (Psomas 2020 §3.3; MLRC) against slow, obvious
references.

References: a brute-force NumPy loop over queries on the full N x N similarity matrix (float64),
pytorch-metric-learning's AccuracyCalculator (P@1, R-Precision, MAP@R, NMI), hand-computed tiny
cases, and sklearn's NMI.
"""

from __future__ import annotations

import logging

import faiss
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
from sklearn.metrics import normalized_mutual_info_score

from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.metrics import _knn as search
from dmlsearch.trainables.metrics import retrieval as metrics
from dmlsearch.trainables.metrics.retrieval import query_retrievals
from dmlsearch.trainables.metrics.retrieval import retrieval_metrics

TOL = 1e-6
KNN_KEYS = ("precision@1", "r_precision", "map@r")


def brute_force(x: np.ndarray, labels: np.ndarray, ks, similarity: str) -> dict[str, float]:
    """The definitions, one query at a time, on the full similarity matrix."""
    x = x.astype(np.float64)
    if similarity == "cosine":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        sim = x @ x.T
    else:
        sim = -((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=-1)
    n = len(x)
    recall = {k: [] for k in ks}
    p1, rp, ap = [], [], []
    for q in range(n):
        r = int((labels == labels[q]).sum()) - 1
        if r == 0:
            continue
        others = [j for j in range(n) if j != q]
        ranked = sorted(others, key=lambda j: -sim[q, j])
        rel = [labels[j] == labels[q] for j in ranked]
        for k in ks:
            recall[k].append(any(rel[:k]))
        p1.append(rel[0])
        rp.append(sum(rel[:r]) / r)
        ap.append(sum(sum(rel[: i + 1]) / (i + 1) for i in range(r) if rel[i]) / r)
    out = {f"recall@{k}": float(np.mean(v)) for k, v in recall.items()}
    out.update(
        {"precision@1": float(np.mean(p1)), "r_precision": float(np.mean(rp)),
         "map@r": float(np.mean(ap)), "num_queries": len(p1)}
    )
    return out


def make_set(seed: int, n: int = 240, d: int = 12, max_class: int = 9, spread: float = 1.0):
    """Random clustered embeddings; uneven classes (1..max_class items) incl. singletons."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, max_class + 1, size=n)
    labels = np.repeat(np.arange(n), sizes)[:n]
    centres = rng.standard_normal((n, d))
    x = centres[labels] + spread * rng.standard_normal((n, d))
    perm = rng.permutation(n)
    labels = (labels[perm] * 7 + 3)  # non-contiguous label values
    return x[perm].astype(np.float32), labels


def assert_close(got: dict, want: dict, keys=None) -> None:
    for key in keys or want:
        assert got[key] == pytest.approx(want[key], abs=TOL), key


@pytest.fixture
def deep_search(monkeypatch):
    """Read every cut-off from the faiss search itself (the GPU strategy), no rank pass."""
    monkeypatch.setattr(metrics, "_CHEAP_DEPTH", 10**9)


# --- brute-force reference -------------------------------------------------------------------

@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_brute_force(seed, similarity):
    x, y = make_set(seed)
    ks = (1, 2, 5, 13, 40, 64, 500)  # beyond the search depth (rank pass) and beyond N - 1
    got = retrieval_metrics(x, y, ks=ks, similarity=similarity)
    assert_close(got, brute_force(x, y, ks, similarity))


@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
def test_matches_brute_force_deep_search(deep_search, similarity):
    x, y = make_set(3)
    ks = (1, 3, 50, 239, 240)
    got = retrieval_metrics(x, y, ks=ks, similarity=similarity)
    assert_close(got, brute_force(x, y, ks, similarity))


def test_matches_brute_force_with_a_class_deeper_than_the_cheap_depth():
    x, y = make_set(4, n=200, spread=2.0)
    y = y.copy()
    y[:60] = -1  # one class of 60: R-Precision and MAP@R need a search 59 deep
    ks = (1, 4, 70)
    assert_close(retrieval_metrics(x, y, ks=ks), brute_force(x, y, ks, "cosine"))


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 12), min_size=2, max_size=40),
    seed=st.integers(0, 2**16),
    ks=st.lists(st.integers(1, 80), min_size=1, max_size=4),
    similarity=st.sampled_from(["cosine", "euclidean"]),
)
def test_matches_brute_force_property(sizes, seed, ks, similarity):
    labels = np.repeat(np.arange(len(sizes)), sizes)
    if np.bincount(labels).max() < 2:
        labels[-1] = labels[0]
    x = np.random.default_rng(seed).standard_normal((len(labels), 6)).astype(np.float32)
    labels = np.random.default_rng(seed + 1).permutation(labels)
    got = retrieval_metrics(x, labels, ks=ks, similarity=similarity)
    assert_close(got, brute_force(x, labels, ks, similarity))


# --- pytorch-metric-learning -----------------------------------------------------------------

@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
@pytest.mark.parametrize("seed", [5, 6])
def test_matches_pml_accuracy_calculator(seed, similarity):
    x, y = make_set(seed, n=400, d=16)
    if similarity == "cosine":  # PML ranks by L2; on unit rows that is the cosine order
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    calc = AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
        k="max_bin_count",
        device=torch.device("cpu"),
    )
    # reference=None: PML uses the queries as references, drops the self-match by index and
    # leaves out queries whose label occurs once (lone query labels).
    want = calc.get_accuracy(x, y)
    got = retrieval_metrics(x, y, similarity=similarity)
    assert got["precision@1"] == pytest.approx(want["precision_at_1"], abs=TOL)
    assert got["r_precision"] == pytest.approx(want["r_precision"], abs=TOL)
    assert got["map@r"] == pytest.approx(want["mean_average_precision_at_r"], abs=TOL)


# --- chunking --------------------------------------------------------------------------------

@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
def test_results_do_not_depend_on_chunk_size(similarity):
    x, y = make_set(7, n=300)
    ks = (1, 4, 60)  # 60 > search depth: the rank pass is chunked too
    results = [retrieval_metrics(x, y, ks=ks, similarity=similarity, chunk_size=c)
               for c in (7, 100, None)]
    assert results[0] == results[1] == results[2]


def test_default_chunks_are_bounded():
    n, d = 60502, 512
    assert search.knn_chunk_size(n, 12, d) * d >= faiss.cvar.distance_compute_blas_threshold
    assert search.knn_chunk_size(n, 1001, d) * 1001 * 48 <= search.CHUNK_BYTES
    rows, cols = search.rank_block_shape(n, search.rank_chunk_size(n))
    assert rows * cols * 5 <= search.CHUNK_BYTES  # float32 scores + bool mask
    assert rows >= 256 and cols < n  # BLAS-sized blocks, never a full row of N


@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
def test_rank_pass_in_many_small_blocks_matches_brute_force(monkeypatch, similarity):
    # 7 queries x 16 items per block: each query's class straddles column blocks.
    monkeypatch.setattr(search, "CHUNK_BYTES", 5 * 7 * 16)
    monkeypatch.setattr(search, "_RANK_MIN_COLS", 16)
    x, y = make_set(17, n=200, spread=2.0)
    ks = (1, 40, 150)
    got = retrieval_metrics(x, y, ks=ks, similarity=similarity, chunk_size=7)
    assert_close(got, brute_force(x, y, ks, similarity))


def test_faiss_settings_are_restored():
    x, y = make_set(16, n=300)
    before = faiss.cvar.distance_compute_blas_database_bs
    retrieval_metrics(x, y, chunk_size=260)
    assert faiss.cvar.distance_compute_blas_database_bs == before


class _FakeGpuIndex:
    """A CPU faiss index standing in for GpuIndexFlatIP/L2 (no GPU on the test machines)."""

    def __init__(self, cpu_index_type, resources, d, config):
        assert isinstance(config.device, int)
        self.index = cpu_index_type(d)

    def add(self, x):
        self.index.add(x)

    def search(self, x, k):
        assert k <= search.GPU_MAX_K
        return self.index.search(x, k)

    def reset(self):
        self.index.reset()


@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
def test_gpu_branch_with_a_cpu_stand_in_for_the_gpu_index(monkeypatch, similarity):
    # The GPU branch: one search as deep as the largest cut-off, self dropped by index.
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    made = []

    class Resources:
        def __init__(self) -> None:
            made.append(self)

        def setTempMemory(self, size: int) -> None:  # noqa: N802 - faiss's name
            self.temp = size

    monkeypatch.setattr(faiss, "StandardGpuResources", Resources)
    monkeypatch.setattr(search, "_GPU_RESOURCES", {})
    monkeypatch.setattr(faiss, "GpuIndexFlatConfig", lambda: type("Config", (), {})())
    monkeypatch.setattr(faiss, "GpuIndexFlatIP", lambda *a: _FakeGpuIndex(faiss.IndexFlatIP, *a))
    monkeypatch.setattr(faiss, "GpuIndexFlatL2", lambda *a: _FakeGpuIndex(faiss.IndexFlatL2, *a))
    x, y = make_set(15)
    ks = (1, 7, 100)
    got = retrieval_metrics(x, y, ks=ks, similarity=similarity, chunk_size=50)
    assert_close(got, brute_force(x, y, ks, similarity))
    retrieval_metrics(x, y, ks=ks, similarity=similarity)  # a second evaluation ...
    assert len(made) == 1 and made[0].temp == 256 << 20  # ... reuses the GPU resources


# --- the torch searcher (a trial's GPU path where faiss has no GPU) -------------------------

@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
@pytest.mark.parametrize("seed", [0, 1])
def test_torch_searcher_gives_the_faiss_metrics(similarity, seed):
    # the same embeddings through both searchers: equal metrics, the deep cut-offs included
    # (torch searches as deep as the largest cut-off; faiss on the CPU adds its rank pass)
    x, y = make_set(seed, n=400, d=16, spread=2.0)
    ks = (1, 4, 50, 300)
    faiss_cpu = retrieval_metrics(x, y, ks=ks, similarity=similarity, nmi=True)
    on_torch = retrieval_metrics(torch.from_numpy(x), y, ks=ks, similarity=similarity, nmi=True,
                                 backend="torch", chunk_size=37)
    assert on_torch == faiss_cpu
    assert_close(on_torch, brute_force(x, y, ks, similarity))


def test_torch_searcher_gives_the_faiss_neighbours():
    x, y = make_set(3, n=150, d=8)
    a = query_retrievals(x, y, k=9)
    b = query_retrievals(x, y, k=9, backend="torch", device=torch.device("cpu"))
    np.testing.assert_array_equal(a.neighbours, b.neighbours)
    np.testing.assert_allclose(a.ap_at_r, b.ap_at_r)


def test_a_cuda_device_without_a_faiss_gpu_searches_with_torch(monkeypatch):
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert metrics._searcher("cuda", None) == (None, torch.device("cuda"))
    assert metrics._searcher(torch.device("cuda", 1), None) == (None, torch.device("cuda:1"))
    assert metrics._searcher("cpu", None) == (None, None)
    assert metrics._searcher(None, None) == (None, None)
    assert metrics._searcher("cuda", "faiss") == (None, None)  # faiss asked for: its CPU
    with pytest.raises(UserError, match="backend: expected None, 'faiss' or 'torch'"):
        metrics._searcher(None, "numpy")


# --- hand-made cases -------------------------------------------------------------------------

LINE = np.array([0.0, 1.0, 2.1, 3.3])
LINE_LABELS = np.array([0, 0, 1, 0])  # label 1 is a singleton: a reference, never a query
# q0: p1(A) p2(B) p3(A) -> AP@R (R=2) = (1/2)(1) = 0.5;  q1: p0(A) p2(B) p3(A) -> 0.5
# q3: p2(B) p1(A) p0(A) -> AP@R = (1/2)(1/2) = 0.25;  R-Precision 1/2 for all three
LINE_WANT = {"recall@1": 2 / 3, "recall@2": 1.0, "recall@3": 1.0, "precision@1": 2 / 3,
             "r_precision": 0.5, "map@r": 1.25 / 3, "num_queries": 3}


def test_four_points_on_a_line_euclidean():
    got = retrieval_metrics(LINE[:, None], LINE_LABELS, ks=(1, 2, 3), similarity="euclidean")
    assert_close(got, LINE_WANT)
    assert got["num_queries"] == 3


def test_four_points_on_a_circle_cosine():
    angle = np.deg2rad(10 * LINE)  # angular gaps rank like the gaps on the line
    x = np.stack([np.cos(angle), np.sin(angle)], axis=1) * np.array([[1], [3], [0.5], [2]])
    assert_close(retrieval_metrics(x, LINE_LABELS, ks=(1, 2, 3)), LINE_WANT)


def test_self_is_excluded_by_index_not_by_position():
    # a and b are duplicates of different classes; whichever faiss lists first, the query must
    # drop itself, not its duplicate (dropping "the first neighbour" gives P@1 = 1 for one).
    x = np.array([[0.0], [0.0], [5.0], [5.2], [-6.0], [-6.2]])
    y = np.array([0, 1, 0, 2, 1, 3])  # e=5.2 and f=-6.2 are singletons
    got = retrieval_metrics(x, y, ks=(1, 3), similarity="euclidean")
    # a: b c e d f -> first hit 1; b: a c e d -> 3; c: e (a|b) -> 1 or 2; d: f (a|b) -> 1 or 2
    assert_close(got, {"recall@1": 0.0, "recall@3": 0.75, "precision@1": 0.0,
                       "r_precision": 0.0, "map@r": 0.0, "num_queries": 4})


def test_rank_pass_counts_only_items_strictly_above_the_best_partner():
    # q = 0 and p = 10 share a class; 33 singletons lie strictly between them; o = -10 (another
    # singleton) ties with p as seen from q. Recall@34 needs the rank pass (cut-off > 32): both
    # queries have 33 items strictly closer than their partner -> rank 33 < 34. Ties go the
    # query's way (counting o as "above" would give q rank 34).
    between = 1 + 8 * np.arange(33) / 32
    x = np.concatenate([[0.0, 10.0, -10.0], between])[:, None]
    y = np.concatenate([[0, 0, 1], 2 + np.arange(33)])
    got = retrieval_metrics(x, y, ks=(1, 33, 34), similarity="euclidean")
    assert_close(got, {"recall@1": 0.0, "recall@33": 0.0, "recall@34": 1.0, "num_queries": 2})


def test_same_class_without_self_helper():
    ids = np.array([[1, 0, 2], [0, 2, 3], [1, 2, 3]])  # rows are queries 0, 1, 2
    codes = np.array([0, 0, 1, 1])
    same = metrics._same_class_without_self(ids, codes, start=0)
    # q0: [1, 2] -> [T, F]; q1 lost itself off the end: [0, 2] -> [T, F]; q2: [1, 3] -> [F, T]
    np.testing.assert_array_equal(same, [[True, False], [True, False], [False, True]])


def test_output_keys_and_types():
    x, y = make_set(8, n=60)
    got = retrieval_metrics(x, y, ks=(1, 10), nmi=True)
    assert list(got) == ["recall@1", "recall@10", "precision@1", "r_precision", "map@r",
                         "num_queries", "nmi"]
    assert isinstance(got["num_queries"], int)
    assert all(type(v) is float for k, v in got.items() if k != "num_queries")
    assert "nmi" not in retrieval_metrics(x, y)


def test_torch_input_equals_numpy_input():
    x, y = make_set(9, n=100)
    assert retrieval_metrics(torch.from_numpy(x).double(), torch.from_numpy(y)) == \
        retrieval_metrics(x, y)


def test_input_arrays_are_not_modified():
    x, y = make_set(10, n=80)
    x0, y0 = x.copy(), y.copy()
    retrieval_metrics(x, y)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, y0)


def test_cuda_request_without_gpu_falls_back_to_cpu(caplog):
    if faiss.get_num_gpus() > 0:
        pytest.skip("faiss sees a GPU here")
    x, y = make_set(11, n=50)
    with caplog.at_level(logging.WARNING):
        got = retrieval_metrics(x, y, device="cuda")
    assert got == retrieval_metrics(x, y, device="cpu")
    assert "faiss sees none" in caplog.text


# --- NMI -------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(5))
def test_nmi_of_two_well_separated_blobs_is_one(seed):
    # Two blobs: Lloyd's iterations recover them from any start. (With many classes one random
    # k-means start, PML's setting kept here, can merge two blobs: NMI is an unstable metric.)
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat([0, 1], 30))
    x = 10 * np.eye(8)[labels] + 0.3 * rng.standard_normal((60, 8))
    assert retrieval_metrics(x, labels, nmi=True)["nmi"] == pytest.approx(1.0, abs=1e-9)


def test_nmi_equals_pml_on_the_same_vectors():
    x, y = make_set(13, n=300, d=8)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)  # the vectors cosine clusters
    calc = AccuracyCalculator(include=("NMI",), device=torch.device("cpu"))
    want = calc.get_accuracy(unit, y)["NMI"]
    got = retrieval_metrics(x, y, nmi=True)["nmi"]
    assert got == pytest.approx(want, abs=TOL)
    assert retrieval_metrics(x, y, nmi=True)["nmi"] == got  # seeded: deterministic


def test_nmi_is_sklearn_nmi_of_the_cluster_assignment(monkeypatch):
    x, y = make_set(14, n=90)
    fixed = np.random.default_rng(0).integers(0, 5, size=len(x))
    monkeypatch.setattr(search, "kmeans_assignments", lambda *a, **k: fixed)
    assert retrieval_metrics(x, y, nmi=True)["nmi"] == pytest.approx(
        normalized_mutual_info_score(y, fixed), abs=1e-12)


# --- input validation ------------------------------------------------------------------------

X4 = np.eye(4, dtype=np.float32)
Y4 = np.array([0, 0, 1, 1])


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"embeddings": np.zeros((2, 3, 4)), "labels": Y4[:2]}, "2-D"),
        ({"embeddings": np.zeros(4), "labels": Y4}, "2-D"),
        ({"embeddings": X4, "labels": Y4[:3]}, "expected 4 labels"),
        ({"embeddings": X4, "labels": Y4[:, None]}, "1-D"),
        ({"embeddings": np.where(X4 == 1, np.nan, X4), "labels": Y4}, "NaN or inf"),
        ({"embeddings": np.where(X4 == 1, np.inf, X4), "labels": Y4}, "NaN or inf"),
        ({"embeddings": X4, "labels": Y4, "ks": (1, 0)}, "integers >= 1"),
        ({"embeddings": X4, "labels": Y4, "ks": (1.5,)}, "integers >= 1"),
        ({"embeddings": X4, "labels": Y4, "ks": ()}, "at least one recall cut-off"),
        ({"embeddings": X4[:1], "labels": Y4[:1]}, "at least 2 items"),
        ({"embeddings": X4, "labels": np.arange(4)}, "2 or more items"),
        ({"embeddings": X4, "labels": Y4, "similarity": "dot"}, "cosine"),
        ({"embeddings": X4, "labels": Y4, "chunk_size": 0}, "positive integer"),
        ({"embeddings": X4, "labels": Y4, "device": "tpu"}, "cuda:N"),
        ({"embeddings": np.array([["a"] * 2] * 4), "labels": Y4}, "float array"),
    ],
)
def test_user_errors(kwargs, fragment):
    with pytest.raises(UserError) as info:
        retrieval_metrics(**kwargs)
    message = str(info.value)
    assert fragment in message
    assert "expected" in message and "got" in message and "fix:" in message


# --- per-query retrievals (what the galleries draw) -----------------------------------------

def brute_force_queries(x: np.ndarray, labels: np.ndarray, k: int, similarity: str):
    """Each query's k nearest others (full sort in float64) and its R-Precision and AP@R."""
    x = x.astype(np.float64)
    if similarity == "cosine":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
        sim = x @ x.T
    else:
        sim = -((x[:, None, :] - x[None, :, :]) ** 2).sum(axis=-1)
    n = len(x)
    neighbours, rp, ap = [], [], []
    for q in range(n):
        ranked = sorted((j for j in range(n) if j != q), key=lambda j: -sim[q, j])
        rel = [labels[j] == labels[q] for j in ranked]
        r = int((labels == labels[q]).sum()) - 1
        neighbours.append(ranked[:k])
        rp.append(sum(rel[:r]) / r if r else 0.0)
        ap.append(sum(sum(rel[: i + 1]) / (i + 1) for i in range(r) if rel[i]) / r if r else 0.0)
    return np.array(neighbours), np.array(rp), np.array(ap)


@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
@pytest.mark.parametrize(("seed", "k", "chunk"), [(0, 8, None), (1, 3, 17), (2, 500, 50)])
def test_query_retrievals_match_brute_force_and_the_metrics(seed, k, chunk, similarity):
    x, y = make_set(seed)
    got = query_retrievals(x, y, k=k, similarity=similarity, chunk_size=chunk)
    neighbours, rp, ap = brute_force_queries(x, y, min(k, len(x) - 1), similarity)
    assert got.neighbours.shape == neighbours.shape == got.same.shape
    assert (got.neighbours == neighbours).all()
    assert (got.same == (y[got.neighbours] == y[:, None])).all()
    np.testing.assert_allclose(got.r_precision, rp, atol=TOL)
    np.testing.assert_allclose(got.ap_at_r, ap, atol=TOL)
    assert (got.partners == np.array([(y == v).sum() - 1 for v in y])).all()
    # Their means over the queries with a partner are the metrics' own numbers.
    metrics = retrieval_metrics(x, y, ks=(1,), similarity=similarity)
    queries = got.partners > 0
    assert got.ap_at_r[queries].mean() == pytest.approx(metrics["map@r"], abs=TOL)
    assert got.r_precision[queries].mean() == pytest.approx(metrics["r_precision"], abs=TOL)
    assert got.same[queries, 0].mean() == pytest.approx(metrics["precision@1"], abs=TOL)


def test_query_retrievals_are_the_metrics_own_knn():
    x, y = make_set(4)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    got = query_retrievals(x, y, k=5)
    ((start, ids),) = search.knn_chunks(x, 6, inner_product=True, gpu=None, chunk=len(x))
    expected = np.array([[j for j in row if j != q][:5] for q, row in enumerate(ids)])
    assert start == 0 and (got.neighbours == expected).all()


def test_query_retrievals_user_errors():
    for k in (0, 1.5, True):
        with pytest.raises(UserError, match="k: expected an integer >= 1"):
            query_retrievals(X4, Y4, k=k)
    with pytest.raises(UserError, match="2 or more items"):
        query_retrievals(X4, np.arange(4))
