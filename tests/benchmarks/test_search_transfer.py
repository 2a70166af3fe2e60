"""The transfer benchmark (``benchmarks/search_transfer.py``, issue 36): one pair, two seeds, a
tiny budget. Its JSON has the issue's schema; the search with transfer tries the points planned
from its source's search first; two runs give the same results; the Nemenyi critical
difference matches the published table (Demšar 2006)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from benchmarks.hpo_measures import nemenyi_cd
from benchmarks.hpo_measures import nemenyi_q
from benchmarks.search_efficiency import DEFAULT_METHOD
from benchmarks.search_transfer import TRANSFER_METHOD
from benchmarks.search_transfer import main
from benchmarks.search_transfer import plot_pairs
from benchmarks.search_transfer import source_of
from tests.helpers import read_png

PAIR = ("omniglot-grid", "omniglot-ms")
BUDGET = 6  # full trainings' worth: transfer_count(6) == 2 points tried first
SEEDS = 2
TIMING = {"seconds", "seconds_per_search", "machine"}


def _run(folder: Path) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    out = folder / "transfer.json"
    md = folder / "transfer.md"
    assert main(["--pairs", "->".join(PAIR), "--seeds", str(SEEDS), "--budget", str(BUDGET),
                 "--concurrency", "2", "--processes", "1", "--out", str(out),
                 "--markdown", str(md)]) == 0
    runs = [json.loads(line) for line in out.with_suffix(".runs.jsonl").read_text().splitlines()]
    return json.loads(out.read_text()), runs, md.read_text()


@pytest.fixture(scope="module")
def twice(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    return (_run(tmp_path_factory.mktemp("first")), _run(tmp_path_factory.mktemp("second")))


def _untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def test_the_results_have_the_issue_schema(twice: tuple[Any, Any]) -> None:
    (body, _, md), _ = twice
    assert body["default_method"] == DEFAULT_METHOD == "tpe+asha"
    assert body["transfer_base"] == "prior-tpe+asha"  # what --prior-from runs
    assert body["clock"] == "virtual" and body["seeds"] == SEEDS
    assert "held_out_table" in body and body["held_out_table"] is None
    table = body["tables"]["omniglot-ms"]
    assert {"best", "worst", "sigma_val"} <= set(table["reference"])
    assert table["sigma_val"] > 0
    pair = body["transfer"]["omniglot-grid->omniglot-ms"]
    assert (pair["source"], pair["target"]) == PAIR
    assert isinstance(pair["misleading"], bool)
    assert 1 <= len(pair["percentiles"]) <= 5
    assert all(0 <= p <= 100 for p in pair["percentiles"])
    assert pair["misleading"] == (sum(pair["percentiles"]) / len(pair["percentiles"]) < 50)
    assert set(pair["methods"]) == {"random+asha", DEFAULT_METHOD, TRANSFER_METHOD}
    assert "transfer" in TRANSFER_METHOD
    for m in pair["methods"].values():
        for f in ("0.25", "1.0"):
            r = m["regret_at"][f]
            assert r["low"] <= r["mean"] <= r["high"] and 0 <= r["mean"] <= 1
            assert 1 <= m["rank_at"][f] <= 3
        assert 0 <= m["within_sigma_5"] <= 1
        assert m["pick_test"] is None or 0 < m["pick_test"] < 1
    # average ranks of three methods sum to 6 on every share of the budget
    for f in ("0.25", "1.0"):
        assert math.isclose(sum(m["rank_at"][f] for m in pair["methods"].values()), 6.0)
        assert set(pair["friedman"][f]) == {"statistic", "p_value"}
    assert math.isclose(pair["nemenyi_cd"], nemenyi_cd(3, SEEDS))
    assert "omniglot-grid->omniglot-ms" in md and TRANSFER_METHOD in md


def test_each_pair_is_plotted_from_its_results(twice: tuple[Any, Any], tmp_path: Path) -> None:
    (body, _, _), _ = twice
    pair = body["transfer"]["omniglot-grid->omniglot-ms"]
    for m in pair["methods"].values():  # the curve the plot draws: one mean per budget point
        curve = m["regret_curve"]
        assert len(curve["epochs"]) == len(curve["mean"]) == len(curve["interval"])
        assert all(0 <= v <= 1 for v in curve["mean"])
    plot_pairs(body, tmp_path)
    read_png(tmp_path / "search_transfer_omniglot-grid_to_omniglot-ms.png")


def test_the_transfer_search_tries_the_transferred_points_first(twice: tuple[Any, Any]) -> None:
    from benchmarks.search_efficiency import reference
    from dmlsearch.search.transfer import plan_transfer
    from dmlsearch.search.transfer import transfer_count

    (_, runs, _), _ = twice
    by_job = {(r["table"], r["method"], r["seed"]): r for r in runs}
    transfers = [r for r in runs if r["method"] == TRANSFER_METHOD]
    assert sorted(r["seed"] for r in transfers) == list(range(SEEDS))
    for run in transfers:
        assert run["source"] == "omniglot-grid" and run["table"] == "omniglot-ms"
        assert 1 <= len(run["transferred"]) <= transfer_count(BUDGET) + 1  # + the defaults
        assert run["first_configs"] == run["transferred"]
        # the same plan again from the source's logged search (the product's plan_transfer)
        source = by_job[("omniglot-grid", DEFAULT_METHOD, run["seed"])]
        plan = plan_transfer(reference("omniglot-ms").space, [source_of(source)],
                             count=transfer_count(BUDGET))
        assert [p.point for p in plan.picks] == run["transferred"]
        # the shared settings come from the source's trials that trained to their end; the
        # target's published defaults are kept after them
        points = [p for p in run["transfer"]["points"] if p["source"] != "space"]
        kept = run["transfer"]["points"][len(points):]
        # (none when a transferred point lies within MIN_SPREAD of them: tests/search)
        assert [(p["trial"], p["taken"]) for p in kept] in ([], [("published defaults", [])])
        for point in points:
            assert "lr" in point["taken"]
            trial = source["trial_records"][int(point["trial"][1:])]
            assert trial["state"] == "completed"
            assert point["point"]["lr"] == pytest.approx(trial["config"]["lr"])
        # without transfer the default starts from the space's published defaults instead
        default = by_job[("omniglot-ms", DEFAULT_METHOD, run["seed"])]
        first = {k: v for k, v in default["trial_records"][0]["config"].items()
                 if k in run["transferred"][0]}
        assert first != run["transferred"][0]


def test_the_transferred_best_trains_to_its_end(twice: tuple[Any, Any]) -> None:
    """As ``--prior-from`` with ASHA does (search/tune/keep.py): the first transferred point is
    kept from early stopping, in every transfer search."""
    (_, runs, _), _ = twice
    for run in (r for r in runs if r["method"] == TRANSFER_METHOD):
        points = run["transfer"]["points"]
        assert [p["to_end"] for p in points] == [True] + [False] * (len(points) - 1)
        best = points[0]["point"]
        assert any(all(c.get(k) == pytest.approx(v) if isinstance(v, float) else c.get(k) == v
                       for k, v in best.items()) for c in run["configs"])  # trained to its end


def test_the_share_of_seeds_with_a_transferred_point_within_sigma(
        twice: tuple[Any, Any]) -> None:
    """``points_within_sigma``: on how many seeds one of the points taken from the source
    (noiseless, on the target) lies within one σ of the target's best; written out here."""
    from benchmarks.search_efficiency import reference

    (body, runs, md), _ = twice
    pair = body["transfer"]["omniglot-grid->omniglot-ms"]
    ref = reference("omniglot-ms", True)
    bar = pair["reference"]["best"] - pair["reference"]["sigma_val"]
    hits = []
    for run in (r for r in runs if r["method"] == TRANSFER_METHOD):
        values = [ref.final({**ref.space.base, **p["point"]})[0]
                  for p in run["transfer"]["points"] if p["taken"]]
        hits.append(max(values) >= bar)
    share = pair["methods"][TRANSFER_METHOD]["points_within_sigma"]
    assert share == pytest.approx(sum(hits) / len(hits))
    assert pair["methods"][DEFAULT_METHOD]["points_within_sigma"] is None
    assert f"within σ of the target's best on {share:.0%} of seeds" in md


def test_what_the_pair_allows_is_the_source_tops_regret_on_the_target(
        twice: tuple[Any, Any]) -> None:
    """``reach``: the misleading check's top configurations, scored on the target, in regret
    units (written out here), their best against half the lower baseline at 25%."""
    from benchmarks.search_efficiency import reference

    (body, _, md), _ = twice
    pair = body["transfer"]["omniglot-grid->omniglot-ms"]
    ref = reference("omniglot-ms", True)
    values = [ref.final(point)[0] for point in pair["misleading_check"]["points"]]
    assert values == pytest.approx(pair["misleading_check"]["target_values"])
    best, worst = pair["reference"]["best"], pair["reference"]["worst"]
    regrets = [min(1.0, max(0.0, (best - v) / (best - worst))) for v in values]
    reach = pair["reach"]
    assert reach["regrets"] == pytest.approx(regrets) and reach["best"] == min(reach["regrets"])
    lower = min(pair["methods"][m]["regret_at"]["0.25"]["mean"]
                for m in ("random+asha", DEFAULT_METHOD))
    assert reach["goal"] == pytest.approx(0.5 * lower)
    assert reach["best_over_baseline"] == pytest.approx(min(regrets) / lower)
    assert reach["within_goal"] == (min(regrets) <= 0.5 * lower)
    assert f"regret {min(regrets):.3f}-{max(regrets):.3f}" in md


def test_what_the_pair_allows_says_when_the_points_cannot_meet_the_goal() -> None:
    from benchmarks.search_transfer import _reach_line
    from benchmarks.search_transfer import reach

    def pair(values: list[float]) -> dict[str, Any]:
        at = {"random+asha": 0.30, DEFAULT_METHOD: 0.20, TRANSFER_METHOD: 0.15}
        return {"reference": {"best": 0.8, "worst": 0.4},
                "misleading_check": {"target_values": values},
                "methods": {m: {"regret_at": {"0.25": {"mean": r}}} for m, r in at.items()}}

    near = reach(pair([0.77, 0.70]))  # regrets 0.075 and 0.25; the goal: 0.5 x 0.20
    assert near["regrets"] == pytest.approx([0.075, 0.25]) and near["within_goal"]
    assert near["goal"] == pytest.approx(0.1)
    far = pair([0.75, 0.90])  # regret 0.125 (and a value above the best: 0)
    assert reach(far)["regrets"] == pytest.approx([0.125, 0.0])
    assert reach(pair([0.75]))["best_over_baseline"] == pytest.approx(0.625)
    assert not reach(pair([0.75]))["within_goal"]
    assert "cannot meet it" in _reach_line(pair([0.75]))
    assert "within the goal" in _reach_line(pair([0.77]))


def test_two_runs_are_the_same(twice: tuple[Any, Any]) -> None:
    (body, runs, md), (body2, runs2, md2) = twice
    assert _untimed(body) == _untimed(body2)

    def key(r: dict[str, Any]) -> tuple[str, str, int]:
        return r["table"], r["method"], r["seed"]

    first = sorted(runs, key=key)
    second = sorted(runs2, key=key)
    assert [(key(r), r["events"], r["configs"]) for r in first] \
        == [(key(r), r["events"], r["configs"]) for r in second]
    assert md == md2


def test_a_run_again_resumes_from_its_log(tmp_path: Path, twice: tuple[Any, Any]) -> None:
    (_, runs, _), _ = twice
    out = tmp_path / "transfer.json"
    out.with_suffix(".runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    assert main(["--pairs", "->".join(PAIR), "--seeds", str(SEEDS), "--budget", str(BUDGET),
                 "--concurrency", "2", "--processes", "1", "--out", str(out)]) == 0
    lines = out.with_suffix(".runs.jsonl").read_text().splitlines()
    assert len(lines) == len(runs)  # nothing ran again


@pytest.mark.parametrize(("k", "q"), [(2, 1.960), (3, 2.343), (4, 2.569), (9, 3.102),
                                      (10, 3.164)])
def test_nemenyi_q_matches_the_published_table(k: int, q: float) -> None:
    assert nemenyi_q(k) == pytest.approx(q, abs=1e-3)


def test_nemenyi_critical_difference() -> None:
    assert nemenyi_cd(3, 30) == pytest.approx(2.343 * math.sqrt(3 * 4 / (6 * 30)), abs=1e-3)
    # issue 36: 9 methods over 3 tables x 20 seeds
    assert nemenyi_cd(9, 60) == pytest.approx(1.55, abs=0.01)
    assert nemenyi_cd(9, 20) > nemenyi_cd(9, 60)
    with pytest.raises(ValueError):
        nemenyi_cd(1, 10)
    with pytest.raises(ValueError):
        nemenyi_cd(3, 0)
