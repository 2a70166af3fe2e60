"""The Pareto front of a multi-objective search, against a brute-force reading of the definition."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dmlsearch.search.pareto import dominates
from dmlsearch.search.pareto import pareto_front


def test_dominance_respects_each_objectives_direction() -> None:
    modes = ("max", "min")
    assert dominates((0.9, 64), (0.8, 128), modes)
    assert not dominates((0.9, 128), (0.8, 64), modes)  # a trade-off: neither dominates
    assert not dominates((0.8, 64), (0.8, 64), modes)  # equal points do not dominate
    assert dominates((0.8, 32), (0.8, 64), modes)


def test_front_of_a_known_set() -> None:
    points = [(0.90, 512), (0.85, 64), (0.88, 128), (0.80, 128), (0.85, 256), (0.90, 1024)]
    assert pareto_front(points, ("max", "min")) == [0, 2, 1]


values = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=25)


@given(values, st.sampled_from([("max", "min"), ("min", "min"), ("max", "max")]))
def test_front_is_exactly_the_non_dominated_set(points: list, modes: tuple) -> None:
    def better_or_equal(a: int, b: int, m: str) -> bool:
        return a >= b if m == "max" else a <= b

    expected = set()
    for i, p in enumerate(points):
        beaten = any(
            all(better_or_equal(q[k], p[k], modes[k]) for k in range(2)) and q != p
            for q in points
        )
        if not beaten:
            expected.add(i)
    front = pareto_front(points, modes)
    assert set(front) == expected
    assert front  # a non-empty set always has a non-dominated point
    firsts = [points[i][0] for i in front]
    assert firsts == sorted(firsts, reverse=modes[0] == "max")
