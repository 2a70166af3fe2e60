"""The comparison's report: comparison.json's schema and numbers, comparison.md's tables (the
thesis's metrics per dataset, the pairwise verdicts, the tournament), and real PNGs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from dmlsearch.search.compare.analysis import analyse
from dmlsearch.search.compare.analysis import metric_label
from dmlsearch.search.compare.analysis import reported_metrics
from dmlsearch.search.compare.comparison_json import comparison_dict
from dmlsearch.search.compare.comparison_md import render_markdown
from dmlsearch.search.compare.comparison_md import tournament_command
from dmlsearch.search.compare.figures import budget_figure
from dmlsearch.search.compare.figures import metric_figure
from dmlsearch.search.compare.outcome import Comparison
from dmlsearch.search.compare.outcome import MethodOutcome
from dmlsearch.search.compare.report import ReportFiles
from dmlsearch.search.compare.report import write_report
from dmlsearch.trainables.errors import UserError
from tests.helpers import read_png

SEEDS = [0, 1, 2, 3, 4]
# proxy_anchor and soft_triple: Holm p 0.249 (not separable); both beat multi_similarity.
R1 = {"proxy_anchor": [0.670, 0.664, 0.672, 0.661, 0.668],
      "soft_triple": [0.668, 0.659, 0.675, 0.660, 0.663],
      "multi_similarity": [0.650, 0.648, 0.655, 0.644, 0.652]}


def _metrics(name: str, r1: float, ks: tuple[int, ...]) -> dict[str, float]:
    out = {f"recall@{k}": min(1.0, r1 + 0.04 * i) for i, k in enumerate(ks)}
    out.update({"precision@1": r1, "r_precision": r1 - 0.3})
    if name != "soft_triple":  # soft_triple's evaluation lacks MAP@R: shown as "–"
        out["map@r"] = r1 - 0.4
    return out


def _method(name: str, r1: list[float], *, ks: tuple[int, ...] = (1, 2, 4, 8),
            seeds: list[int] = SEEDS, planned_epochs: float = 400.0, **kw: Any) -> MethodOutcome:
    used = 290.0 if name == "soft_triple" else planned_epochs
    fields: dict[str, Any] = dict(
        name=name, space=f"{name}.yaml", source="Psomas 2020, Table 15",
        budget_planned={"trials": 20.0, "epochs": planned_epochs, "gpu_hours": 2.0},
        budget_used={"trials": 14.0 if name == "soft_triple" else 20.0, "epochs": used,
                     "gpu_hours": 1.5},
        fell_short="trained out (14 distinct configurations)" if name == "soft_triple" else None,
        best_trial="t0007", best_val=0.6, best_config={"loss": name, "lr": 1e-4},
        trajectory=[(10, 0.40), (50, 0.52), (120, 0.55), (int(used), 0.58)],
        seeds=seeds, test_metrics=[_metrics(name, v, ks) for v in r1],
        study_dir=f"/results/{name}")
    fields.update(kw)
    return MethodOutcome(**fields)


def _comparison(dataset: str = "cub200", *, name: str = "cub-bn-512",
                r1: dict[str, list[float]] = R1, **kw: Any) -> Comparison:
    ks = (1, 10, 100, 1000) if dataset == "sop" else (1, 2, 4, 8)
    return Comparison(name=name, dataset=dataset, metric="recall@1", mode="max",
                      shared={"backbone": "bninception", "embedding_size": 512},
                      methods=[_method(n, v, ks=ks, **kw) for n, v in r1.items()])


def _holm(p: list[float]) -> list[float]:
    """Holm by its definition, written out separately from the module's."""
    m = len(p)
    order = np.argsort(p)
    adjusted = np.empty(m)
    running = 0.0
    for j, i in enumerate(order):
        running = max(running, min(1.0, (m - j) * p[i]))
        adjusted[i] = running
    return adjusted.tolist()


def test_reported_metrics_per_dataset() -> None:
    assert reported_metrics("cub200", "recall@1") == [
        "recall@1", "recall@2", "recall@4", "recall@8", "precision@1", "r_precision", "map@r"]
    assert reported_metrics("sop", "recall@1")[:4] == [
        "recall@1", "recall@10", "recall@100", "recall@1000"]
    assert reported_metrics("glyphs", "eer")[:2] == ["eer", "recall@1"]
    assert [metric_label(m) for m in ("recall@10", "precision@1", "r_precision", "map@r",
                                      "eer")] == ["R@10", "P@1", "R-Precision", "MAP@R", "eer"]


def test_json_schema_and_numbers() -> None:
    comparison = _comparison()
    data = comparison_dict(analyse(comparison))
    json.dumps(data, allow_nan=False)  # plain JSON
    assert set(data) >= {"name", "dataset", "metric", "shared", "seeds", "methods", "pairs"}
    assert data["seeds"] == SEEDS and data["dataset"] == "cub200"
    assert data["shared"] == {"backbone": "bninception", "embedding_size": 512}
    assert list(data["methods"]) == list(R1)
    for name, values in R1.items():
        m = data["methods"][name]
        assert set(m) >= {"test_mean", "test_ci95", "rank", "group", "tied", "budget",
                          "best_val", "best_config", "study_dir"}
        assert m["test_mean"]["recall@1"] == pytest.approx(np.mean(values))
        low, high = sps.t.interval(0.95, 4, loc=np.mean(values), scale=sps.sem(values))
        assert m["test_ci95"]["recall@1"] == pytest.approx((high - low) / 2)
        assert set(m["budget"]) == {"planned", "used", "fell_short"}
        assert m["study_dir"] == f"/results/{name}"
    assert "map@r" not in data["methods"]["soft_triple"]["test_mean"]
    assert data["methods"]["soft_triple"]["budget"]["fell_short"].startswith("trained out")
    ranks = {n: (m["rank"], m["group"], m["tied"]) for n, m in data["methods"].items()}
    assert ranks == {"proxy_anchor": (1, 1, True), "soft_triple": (2, 1, True),
                     "multi_similarity": (3, 2, False)}
    # pairs: 3 for each of the 6 metrics all methods have, 1 for MAP@R (soft_triple lacks it)
    assert len(data["pairs"]) == 3 * 6 + 1
    r1 = [p for p in data["pairs"] if p["metric"] == "recall@1"]
    assert [(p["a"], p["b"]) for p in r1] == [("proxy_anchor", "soft_triple"),
                                              ("proxy_anchor", "multi_similarity"),
                                              ("soft_triple", "multi_similarity")]
    expected = [sps.ttest_rel(R1[p["a"]], R1[p["b"]]) for p in r1]
    assert [p["p"] for p in r1] == pytest.approx([e.pvalue for e in expected])
    assert [p["p_holm"] for p in r1] == pytest.approx(_holm([e.pvalue for e in expected]))
    for p, e in zip(r1, expected):
        ci = e.confidence_interval(0.95)
        assert p["ci95"] == pytest.approx([ci.low, ci.high]) and p["test"] == "paired t"
        assert p["diff"] == pytest.approx(np.mean(np.subtract(R1[p["a"]], R1[p["b"]])))
    assert [p["verdict"] for p in r1] == ["not separable at 5%", "a better", "a better"]
    mapr = [p for p in data["pairs"] if p["metric"] == "map@r"]
    assert len(mapr) == 1 and mapr[0]["p_holm"] == pytest.approx(mapr[0]["p"])  # family of 1


def test_permutation_test_in_the_json() -> None:
    data = comparison_dict(analyse(_comparison(), test="permutation"))
    assert {p["test"] for p in data["pairs"]} == {"permutation"}
    # 5 seeds: 32 sign flips; proxy_anchor beats multi_similarity on every seed -> 2/32
    pair = next(p for p in data["pairs"]
                if p["metric"] == "recall@1" and p["b"] == "multi_similarity"
                and p["a"] == "proxy_anchor")
    assert pair["p"] == pytest.approx(2 / 32)
    # the smallest p, 2/32, times 3 pairs is above 0.05: the report says no pair can separate
    text = render_markdown(analyse(_comparison(), test="permutation"))
    assert "**The permutation test cannot separate any pair here**" in text
    assert "2/2^5 = 0.0625" in text and "over the 3 pairs" in text
    assert "cannot separate any pair" not in render_markdown(analyse(_comparison()))
    six = {k: [*v, v[0]] for k, v in R1.items()}  # 6 seeds: 2/64 x 3 = 0.094, still too few
    text = render_markdown(analyse(_comparison(r1=six, seeds=[*SEEDS, 5]), test="permutation"))
    assert "2/2^6 = 0.0312" in text
    seven = {k: [*v, v[0], v[1]] for k, v in R1.items()}  # 7 seeds: 2/128 x 3 = 0.047
    text = render_markdown(analyse(_comparison(r1=seven, seeds=[*SEEDS, 5, 6]),
                                   test="permutation"))
    assert "cannot separate any pair" not in text


def test_seeds_must_match() -> None:
    methods = [_method("a", [0.5, 0.6]), _method("b", [0.5, 0.6], seeds=[1, 0])]
    comparison = Comparison(name="x", dataset="cub200", metric="recall@1", mode="max",
                            shared={}, methods=methods)
    with pytest.raises(ValueError, match="same seeds"):
        analyse(comparison)


def test_markdown_tables_cub() -> None:
    comparison = _comparison()
    text = render_markdown(analyse(comparison), metric_png="m.png", budget_png="b.png")
    assert "| Method | R@1 | R@2 | R@4 | R@8 | P@1 | R-Precision | MAP@R |" in text
    assert "R@10" not in text
    st = next(line for line in text.splitlines() if line.startswith("| soft_triple | 0.665"))
    assert st.endswith("| –  |") or st.rstrip().endswith("– |")  # MAP@R missing
    # the ranking: rank, method, mean ± 95% interval, group and tie, budget used
    half = (sps.t.ppf(0.975, 4) * np.std(R1["proxy_anchor"], ddof=1) / np.sqrt(5))
    assert (f"| 1 | proxy_anchor | 0.6670 ± {half:.4f} | 1 (tied with soft_triple) | "
            "20 trials (100%), 400 epochs (100%), 1.5 GPU-hours (75%) |") in text
    assert "| 3 | multi_similarity | 0.6498 ± " in text
    # the pairwise table: the better-ranked method first, with its verdict
    assert "| proxy_anchor vs soft_triple | +0.0020 [" in text
    assert "| not separable at 5% |" in text and "| proxy_anchor better |" in text
    # the header: what, where, shared settings, seeds, budgets, who fell short
    assert "- dataset: cub200" in text and "backbone=bninception, embedding_size=512" in text
    assert "- seeds: 0, 1, 2, 3, 4 (5 per method" in text
    assert "**soft_triple used less than planned**: trained out" in text
    assert "![test recall@1 per method](m.png)" in text and "(b.png)" in text
    assert "Tournament" not in text


def test_markdown_tables_sop_and_tournament() -> None:
    cub = _comparison()
    sop = _comparison("sop", name="sop-r50-512",
                      r1={"proxy_anchor": [0.79, 0.80, 0.795, 0.79, 0.80],
                          "soft_triple": [0.80, 0.81, 0.805, 0.80, 0.81],
                          "multi_similarity": [0.77, 0.78, 0.775, 0.77, 0.78]})
    text = render_markdown(analyse(sop), comparisons=[cub, sop])
    assert "| Method | R@1 | R@10 | R@100 | R@1000 | P@1 | R-Precision | MAP@R |" in text
    assert "R@2 " not in text and "R@8" not in text
    assert "## Tournament (2 experiments)" in text
    # cub: pa 1, st 2, ms 3; sop: st 1, pa 2, ms 3 -> pa 1.5, st 1.5, ms 3
    assert "| 1 | proxy_anchor | 1.50 | 0.50 | 2 | 1 2 |" in text
    assert "| 2 | soft_triple | 1.50 | 0.50 | 2 | 2 1 |" in text
    assert "| 3 | multi_similarity | 3.00 | 0.00 | 2 | 3 3 |" in text
    assert "1. cub-bn-512: cub200" in text and "2. sop-r50-512: sop" in text
    eer = Comparison(name="v", dataset="cifar10", metric="eer", mode="min", shared={},
                     methods=[])
    assert "No tournament: the comparisons optimise different metrics" in render_markdown(
        analyse(sop), comparisons=[sop, eer])


def test_one_seed_and_a_method_without_results() -> None:
    failed = _method("broken", [], seeds=[], trajectory=[])
    methods = [_method("a", [0.6], seeds=[0]), _method("b", [0.5], seeds=[0]), failed]
    comparison = Comparison(name="x", dataset="cars196", metric="recall@1", mode="max",
                            shared={}, methods=methods)
    analysis = analyse(comparison)
    data = comparison_dict(analysis)
    broken = data["methods"]["broken"]
    assert broken["rank"] is None and broken["test_mean"] == {} and broken["tied"] is False
    assert data["methods"]["a"]["test_ci95"]["recall@1"] is None
    pair = next(p for p in data["pairs"] if p["metric"] == "recall@1")
    assert pair["p"] is None and pair["ci95"] is None and "2 seeds" in pair["note"]
    assert (data["methods"]["a"]["group"], data["methods"]["a"]["tied"]) == (1, True)
    text = render_markdown(analysis)
    assert "no interval and no test" in text
    assert "| – | broken | – | not ranked (no test value) |" in text
    assert "| 1 | a | 0.6000 (1 seed) |" in text


def test_min_mode_ranks_lowest_first() -> None:
    def eer(name: str, values: list[float]) -> MethodOutcome:
        return _method(name, values, test_metrics=[{"eer": v, "recall@1": 0.5} for v in values])

    comparison = Comparison(name="v", dataset="cifar10", metric="eer", mode="min", shared={},
                            methods=[eer("hi", [0.05, 0.06, 0.055, 0.052, 0.058]),
                                     eer("lo", [0.03, 0.032, 0.031, 0.029, 0.033])])
    analysis = analyse(comparison)
    assert [r.method for r in analysis.ranking] == ["lo", "hi"]
    text = render_markdown(analysis)
    assert "| Method | eer | R@1 |" in text and "lower is better" in text
    assert "| lo vs hi | -0.0" in text and "| lo better |" in text


def test_write_report_files_and_figures(tmp_path: Path) -> None:
    comparison = _comparison()
    files = write_report(comparison, ReportFiles.in_folder(tmp_path / "cmp"),
                         comparisons=[comparison, _comparison("sop", name="sop")])
    assert files.json.name == "comparison.json" and files.markdown.name == "comparison.md"
    data = json.loads(files.json.read_text())
    assert data["methods"]["proxy_anchor"]["rank"] == 1
    text = files.markdown.read_text()
    assert f"({files.metric_png.name})" in text and f"({files.budget_png.name})" in text
    assert "## Tournament" in text
    for png in (files.metric_png, files.budget_png):
        read_png(png)
    assert not [p for p in (tmp_path / "cmp").iterdir() if p.name.startswith(".")]


def test_figures_of_odd_comparisons(tmp_path: Path) -> None:
    # different planned budgets, no trajectories, nobody with test results
    methods = [_method("a", [0.6, 0.7], seeds=[0, 1], planned_epochs=100.0),
               _method("b", [0.5, 0.6], seeds=[0, 1], planned_epochs=200.0, trajectory=[])]
    analysis = analyse(Comparison(name="odd", dataset="omniglot", metric="recall@1", mode="max",
                                  shared={}, methods=methods))
    read_png(metric_figure(analysis, tmp_path / "m.png"))
    read_png(budget_figure(analysis, tmp_path / "b.png"))
    empty = [_method("c", [], seeds=[], trajectory=[])]
    analysis = analyse(Comparison(name="none", dataset="omniglot", metric="recall@1",
                                  mode="max", shared={}, methods=empty))
    read_png(metric_figure(analysis, tmp_path / "m2.png"))
    read_png(budget_figure(analysis, tmp_path / "b2.png"))
    assert "nothing to compare" in render_markdown(analysis)


def test_json_has_no_nan() -> None:
    nan = _method("nan", [0.6, 0.6], seeds=[0, 1], best_val=float("nan"),
                  test_metrics=[{"recall@1": 0.6}, {"recall@1": float("nan")}])
    ok = _method("ok", [0.6, 0.7], seeds=[0, 1])
    data = comparison_dict(analyse(Comparison(name="x", dataset="cub200", metric="recall@1",
                                              mode="max", shared={}, methods=[nan, ok])))
    json.dumps(data, allow_nan=False)
    assert data["methods"]["nan"]["best_val"] is None
    assert data["methods"]["nan"]["test_per_seed"][1]["recall@1"] is None
    assert "recall@1" not in data["methods"]["nan"]["test_mean"]  # a seed without a value
    assert data["methods"]["nan"]["rank"] is None and data["methods"]["ok"]["rank"] == 1


def test_the_tournament_of_finished_comparisons_reads_their_json(tmp_path: Path) -> None:
    cub = _comparison()
    sop = _comparison("sop", name="sop-r50-512",
                      r1={"proxy_anchor": [0.79, 0.80, 0.795, 0.79, 0.80],
                          "soft_triple": [0.80, 0.81, 0.805, 0.80, 0.81],
                          "multi_similarity": [0.77, 0.78, 0.775, 0.77, 0.78]})
    for c in (cub, sop):
        write_report(c, ReportFiles.in_folder(tmp_path / c.name))
    out = tmp_path / "t.md"
    text = tournament_command([tmp_path / "cub-bn-512", tmp_path / "sop-r50-512"], out=out)
    assert out.read_text() == text
    # the same rows as the tournament of the comparisons themselves (Table 11)
    expected = render_markdown(analyse(sop), comparisons=[cub, sop])
    for row in ("| 1 | proxy_anchor | 1.50 | 0.50 | 2 | 1 2 |",
                "| 2 | soft_triple | 1.50 | 0.50 | 2 | 2 1 |",
                "| 3 | multi_similarity | 3.00 | 0.00 | 2 | 3 3 |"):
        assert row in text and row in expected
    with pytest.raises(UserError, match="at least two comparisons"):
        tournament_command([tmp_path / "cub-bn-512"], out=out)
    with pytest.raises(UserError, match="no comparison.json in"):
        tournament_command([tmp_path / "cub-bn-512", tmp_path], out=out)


def test_budgets_read_as_amounts_not_keys() -> None:
    """The budget columns say ``400 epochs`` and ``0.0039 device-hours``, not
    ``epochs=400`` and ``device_hours=0.003888``."""
    from dmlsearch.search.compare.comparison_md import _amount

    assert [_amount(k, v) for k, v in [("epochs", 400.0), ("trials", 1.0), ("device_hours",
            0.003888), ("gpu_hours", 2.0), ("gpu_hours", 12.25), ("device_hours", 1234.5)]] == [
        "400 epochs", "1 trial", "0.0039 device-hours", "2 GPU-hours", "12.2 GPU-hours",
        "1234 device-hours"]
    assert _amount("epochs", 2.5) == "epochs=2.5" and _amount("other", 3.0) == "other=3"
    text = render_markdown(analyse(_comparison()), metric_png="m.png", budget_png="b.png")
    assert "| 20 trials, 400 epochs, 2 GPU-hours |" in text
