"""Transfer between searches (search/transfer.py): which parameters are shared, which source
trials become the points a search starts from, and how they are mapped into the target space
(a loss's parameters only from the same loss, what the source did not search from the target's
own warm starts, numbers moved into range), diverse picks, several sources in turn, and the
refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import TrialState
from dmlsearch.search.transfer import Pick
from dmlsearch.search.transfer import Source
from dmlsearch.search.transfer import Transfer
from dmlsearch.search.transfer import plan_transfer
from dmlsearch.search.transfer import read_source
from dmlsearch.search.transfer import transfer_count
from dmlsearch.spaces import load_space
from dmlsearch.trainables.errors import UserError

REPO = Path(__file__).resolve().parents[2]
MS_SPACE = REPO / "benchmarks" / "curves" / "omniglot_ms_table.yaml"  # MS only: 5 params


def _trial(number: int, score: float, state: TrialState = TrialState.COMPLETED,
           **config: object) -> TrialRecord:
    return TrialRecord(trial_id=f"ray{number}", config=dict(config), state=state, score=score,
                       number=number, iterations=8)


def _source(*trials: TrialRecord, name: str = "src",
            searched: tuple[str, ...] = ("loss", "lr", "embedding_size", "loss.margin",
                                         "loss.alpha", "loss.beta", "loss.epsilon")) -> Source:
    return Source.of_records(name, trials, searched=searched, metric="map@r", mode="max",
                             dataset="glyphs", space="quickstart")


MS = {"loss": "multi_similarity", "embedding_size": 128, "loss.beta": 40.0,
      "loss.epsilon": 0.3}


def _transferred(transfer: Transfer) -> list[Pick]:
    """The points a plan took from its sources (and other branches' warm starts): all but the
    target's published defaults kept after them."""
    return [p for p in transfer.picks if p.trial != "published defaults"]


def test_shared_parameters_come_from_the_source_and_the_rest_from_the_targets_warm_start():
    space = load_space("quickstart")  # searches loss, lr, embedding size, the losses' params
    source = _source(_trial(3, 0.8, lr=2e-3, **MS, **{"loss.margin": 0.7, "loss.alpha": 20.0}),
                     searched=("loss", "lr", "loss.margin"))  # alpha, beta, ... fixed there
    transfer = plan_transfer(space, [source], count=1)
    (pick,) = _transferred(transfer)
    assert transfer.shared == {"src": ("loss", "lr", "loss.margin")}
    assert pick.trial == "t03" and pick.score == 0.8
    # loss, lr and margin from the source; embedding size, alpha, beta, epsilon: the quickstart's
    # MultiSimilarity warm start (Table 4 defaults, 64-d), not the source's fixed values
    assert pick.point == {"loss": "multi_similarity", "lr": 2e-3, "embedding_size": 64,
                          "loss.margin": 0.7, "loss.alpha": 2.0, "loss.beta": 50.0,
                          "loss.epsilon": 0.1}
    assert pick.taken == ("loss", "lr", "loss.margin")
    # in the target's Optuna names, what the searcher enqueues
    assert transfer.named[0]["loss.margin[multi_similarity]"] == 0.7
    assert transfer.named[0]["lr"] == 2e-3


def test_a_losss_parameters_come_only_from_a_trial_of_that_loss():
    space = load_space(str(MS_SPACE))  # MultiSimilarity fixed in its base
    proxy = _trial(1, 0.9, loss="proxy_anchor", lr=4e-3, **{"loss.margin": 0.1,
                                                              "loss.alpha": 32.0})
    transfer = plan_transfer(space, [_source(proxy)], count=1)
    (pick,) = _transferred(transfer)
    assert pick.taken == ("lr",)  # ProxyAnchor's margin is not MultiSimilarity's
    assert pick.point["lr"] == 4e-3
    assert pick.point["loss.margin"] == 0.5 and pick.point["loss.alpha"] == 2.0  # its defaults


def test_trials_giving_more_shared_values_come_first_then_the_sources_order():
    space = load_space(str(MS_SPACE))
    proxy = _trial(1, 0.9, loss="proxy_anchor", lr=4e-3)
    ms_worse = _trial(2, 0.7, lr=1e-4, **MS, **{"loss.margin": 0.9, "loss.alpha": 80.0})
    ms_better = _trial(3, 0.8, lr=8e-3, **MS, **{"loss.margin": 0.2, "loss.alpha": 10.0})
    picks = _transferred(plan_transfer(space, [_source(proxy, ms_worse, ms_better)], count=3))
    assert [p.trial for p in picks] == ["t03", "t02", "t01"]


def test_numbers_outside_the_targets_range_move_to_its_nearest_end_on_its_step():
    space = load_space("quickstart")  # lr in [3e-4, 1e-2]; margin step 0.1 in [0, 1]
    far = _trial(1, 0.9, lr=0.5, **MS, **{"loss.margin": 0.73, "loss.alpha": 300.0})
    (pick,) = _transferred(plan_transfer(space, [_source(far)], count=1))
    assert pick.point["lr"] == pytest.approx(1e-2)
    assert pick.point["loss.margin"] == pytest.approx(0.7)
    assert pick.point["loss.alpha"] == pytest.approx(100.0)


def test_a_pick_too_close_to_one_taken_is_skipped_for_the_next():
    space = load_space(str(MS_SPACE))
    best = _trial(1, 0.90, lr=1e-3, **MS, **{"loss.margin": 0.5, "loss.alpha": 20.0})
    twin = _trial(2, 0.89, lr=1.05e-3, **MS, **{"loss.margin": 0.5, "loss.alpha": 20.0})
    other = _trial(3, 0.70, lr=5e-3, **MS, **{"loss.margin": 0.9, "loss.alpha": 90.0})
    picks = _transferred(plan_transfer(space, [_source(best, twin, other)], count=2))
    assert [p.trial for p in picks] == ["t01", "t03"]


def test_only_trials_trained_to_their_end_when_there_are_any():
    space = load_space(str(MS_SPACE))
    pruned = _trial(1, 0.95, TrialState.PRUNED, lr=9e-3, **MS, **{"loss.margin": 0.1})
    done = _trial(2, 0.60, lr=2e-4, **MS, **{"loss.margin": 0.9})
    picks = _transferred(plan_transfer(space, [_source(pruned, done)], count=3))
    assert [p.trial for p in picks] == ["t02"]


def test_several_sources_give_their_best_in_turn():
    space = load_space(str(MS_SPACE))
    a = _source(_trial(1, 0.9, lr=1e-4, **MS), _trial(2, 0.8, lr=1e-2, **MS), name="a")
    b = _source(_trial(7, 0.5, lr=1e-3, **MS, **{"loss.margin": 0.9}), name="b")
    picks = _transferred(plan_transfer(space, [a, b], count=3))
    assert [(p.source, p.trial) for p in picks] == [("a", "t01"), ("b", "t07"), ("a", "t02")]


def test_a_source_sharing_nothing_is_refused_naming_both_sides():
    space = load_space(str(MS_SPACE))
    other = _source(_trial(1, 0.9, embedding_size=32), searched=("embedding_size",))
    with pytest.raises(UserError) as caught:
        plan_transfer(space, [other])
    text = str(caught.value)
    assert "searched embedding_size" in text and "loss.alpha, loss.beta" in text
    assert "no parameter in common" in text and "leave out --prior-from" in text


def test_a_folder_without_a_search_is_refused(tmp_path: Path):
    with pytest.raises(UserError, match=f"--prior-from {tmp_path}: no search results"):
        read_source(tmp_path)


@pytest.mark.parametrize(("trials", "count"), [(1, 1), (5, 1), (6, 2), (9, 3), (40, 3)])
def test_the_count_tried_first_is_at_most_three_and_a_third_of_the_budget(trials, count):
    assert transfer_count(trials) == count


def test_in_a_space_of_both_losses_the_sources_best_come_first_whichever_loss():
    space = load_space("quickstart")
    ms = _trial(1, 0.80, lr=1e-3, **MS, **{"loss.margin": 0.7})
    proxy = _trial(2, 0.90, loss="proxy_anchor", lr=5e-3, embedding_size=128,
                   **{"loss.margin": 0.1, "loss.alpha": 32.0})
    picks = _transferred(plan_transfer(space, [_source(ms, proxy)], count=2))
    assert [p.trial for p in picks] == ["t02", "t01"]  # by score: ProxyAnchor's 0.90 first
    assert picks[0].point["loss"] == "proxy_anchor"


def test_a_source_that_fixed_the_loss_leaves_the_other_losses_their_warm_starts():
    space = load_space("quickstart")  # searches MultiSimilarity or ProxyAnchor
    only_ms = _source(_trial(4, 0.7, lr=4e-3, **MS, **{"loss.margin": 0.9}),
                      searched=("lr", "loss.margin"))  # its loss fixed: no evidence on it
    transfer = plan_transfer(space, [only_ms], count=3)
    first, added, default = transfer.picks
    assert first.point["loss"] == "multi_similarity"  # where the shared margin belongs
    assert first.taken == ("lr", "loss.margin")  # the loss itself was not transferred
    assert added.source == "space" and added.point["loss"] == "proxy_anchor"
    assert added.point == load_space("quickstart").points()[1]  # ProxyAnchor's Table 4 start
    assert default.trial == "published defaults"  # MultiSimilarity's, the best pick's loss
    assert default.point == load_space("quickstart").points()[0]
    assert len(transfer.named) == 3


def test_picks_differ_in_what_was_transferred_not_in_what_both_keep():
    space = load_space(str(MS_SPACE))  # five parameters; only lr transfers here
    trials = [_trial(1, 0.9, loss="proxy_anchor", lr=1e-3),
              _trial(2, 0.8, loss="proxy_anchor", lr=2e-3),
              _trial(3, 0.7, loss="proxy_anchor", lr=4e-3)]
    picks = _transferred(plan_transfer(space, [_source(*trials)], count=3))
    # lr steps of 2x are 0.15 of the log range (1e-4..1e-2) apart: each pick is diverse
    assert [p.trial for p in picks] == ["t01", "t02", "t03"]


def test_the_published_defaults_of_the_best_picks_loss_are_tried_after_the_transferred():
    """A search with transfer keeps the start a search without it has: the target's own warm
    start in the best pick's branch comes after the transferred points, and the terminal
    says so."""
    space = load_space("quickstart")
    ms = _trial(1, 0.80, lr=4e-3, **MS, **{"loss.margin": 0.7})
    proxy = _trial(2, 0.90, loss="proxy_anchor", lr=5e-3, embedding_size=128,
                   **{"loss.margin": 0.1, "loss.alpha": 32.0})
    transfer = plan_transfer(space, [_source(ms, proxy)], count=2)
    assert [(p.source, p.trial) for p in transfer.picks] == [
        ("src", "t02"), ("src", "t01"), ("space", "published defaults")]
    default = transfer.picks[-1]
    assert default.point == space.points()[1]  # ProxyAnchor's Table 4 start: the best's loss
    assert default.taken == () and default.score is None
    assert transfer.named[-1] == space.named(space.points()[1])  # enqueued last
    assert transfer.lines()[-1] == "and this space's published defaults tried beside them"
    assert transfer.to_json()["points"][-1]["trial"] == "published defaults"


def test_no_published_defaults_of_their_own_when_a_transferred_point_stands_for_them():
    space = load_space("quickstart")
    near = _trial(1, 0.9, **{**MS, **space.points()[0], "lr": 1.1e-3})  # the MS defaults
    transfer = plan_transfer(space, [_source(near)], count=1)
    assert [p.trial for p in transfer.picks] == ["t01"]
    assert not any("published defaults" in line for line in transfer.lines())
    # one far from them (lr 9x, margin and alpha at the range's far end): the defaults stay
    far = _trial(1, 0.9, **{**MS, "lr": 9e-3, "loss.margin": 0.9, "loss.alpha": 80.0})
    kept = plan_transfer(space, [_source(far)], count=1).picks
    assert [p.trial for p in kept] == ["t01", "published defaults"]


def test_the_first_transferred_point_trains_to_its_end_and_says_so():
    """The best source's best is kept from early stopping (search/tune/keep.py); the others,
    and the published defaults, are judged as every trial is; a scheduler that cannot keep it
    (``to_end=0``) keeps none."""
    space = load_space("quickstart")
    ms = _trial(1, 0.80, lr=4e-3, **MS, **{"loss.margin": 0.7})
    proxy = _trial(2, 0.90, loss="proxy_anchor", lr=5e-3, embedding_size=128,
                   **{"loss.margin": 0.1, "loss.alpha": 32.0})
    transfer = plan_transfer(space, [_source(ms, proxy)], count=2)
    assert [(p.trial, p.to_end) for p in transfer.picks] == [
        ("t02", True), ("t01", False), ("published defaults", False)]
    assert transfer.to_end() == (tuple(transfer.picks[0].point.items()),)
    assert transfer.lines()[1] == ("its best (t02) trains to its end: early stopping does not "
                                   "judge it on its first epochs")
    assert [p["to_end"] for p in transfer.to_json()["points"]] == [True, False, False]
    none = plan_transfer(space, [_source(ms, proxy)], count=2, to_end=0)
    assert none.to_end() == () and not any("trains to its end" in x for x in none.lines())
    assert [p.point for p in none.picks] == [p.point for p in transfer.picks]


def test_with_several_sources_only_the_first_sources_best_trains_to_its_end():
    space = load_space("quickstart")
    a = _source(_trial(1, 0.9, lr=4e-3, **MS, **{"loss.margin": 0.7}), name="a")
    b = _source(_trial(1, 0.8, lr=1e-4, **MS, **{"loss.margin": 0.2}), name="b")
    transfer = plan_transfer(space, [a, b], count=2)
    assert [(p.source, p.to_end) for p in transfer.picks if p.taken] == [("a", True),
                                                                          ("b", False)]
    assert sum("trains to its end" in line for line in transfer.lines()) == 1
