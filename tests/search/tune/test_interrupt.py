"""Ctrl-C while Ray Tune runs (``tune/tuner._interrupt_gracefully``): the first one asks Ray Tune
for its graceful stop through SIGUSR1 (the signal Ray Tune registers for it) and is remembered;
a second stops at once, unsaved; one before Ray Tune listens stops at once too; the handlers
and Ray Tune's switch are as they were afterwards. Real signals to this process; Ray Tune's
handler stood in for by one that records it was called (the real one: tests/e2e/
test_interrupt.py)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from dmlsearch.search.tune.tuner import SearchInterrupted
from dmlsearch.search.tune.tuner import _interrupt_gracefully
from dmlsearch.search.tune.tuner import fit

SWITCH = "TUNE_DISABLE_SIGINT_HANDLER"


@pytest.fixture(autouse=True)
def _handlers_back() -> Iterator[None]:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGINT, before[0])
    signal.signal(signal.SIGUSR1, before[1])


def test_the_first_ctrl_c_asks_ray_tune_to_stop_and_is_remembered() -> None:
    asked: list[int] = []
    with _interrupt_gracefully() as interrupted:
        assert os.environ[SWITCH] == "1"  # Ray Tune's own SIGINT handler off
        signal.signal(signal.SIGUSR1, lambda signum, frame: asked.append(signum))  # Ray's
        os.kill(os.getpid(), signal.SIGINT)
        assert interrupted.is_set() and asked == [signal.SIGUSR1]
        with pytest.raises(SearchInterrupted) as second:
            os.kill(os.getpid(), signal.SIGINT)
        assert second.value.saved is False
    assert SWITCH not in os.environ


def test_a_ctrl_c_before_ray_tune_listens_stops_at_once() -> None:
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    with _interrupt_gracefully() as interrupted:
        with pytest.raises(KeyboardInterrupt) as stopped:
            os.kill(os.getpid(), signal.SIGINT)
        assert not isinstance(stopped.value, SearchInterrupted)
        assert not interrupted.is_set()


def test_everything_is_as_it_was_afterwards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SWITCH, "0")

    def mine(signum: int, frame: object) -> None:
        del signum, frame
    signal.signal(signal.SIGINT, mine)
    usr1 = signal.getsignal(signal.SIGUSR1)
    with _interrupt_gracefully():
        signal.signal(signal.SIGUSR1, lambda signum, frame: None)  # Ray's, left registered
    assert signal.getsignal(signal.SIGINT) is mine
    assert signal.getsignal(signal.SIGUSR1) == usr1
    assert os.environ[SWITCH] == "0"


class _SecondCtrlCInRaysWait:
    """A Tuner whose ``fit`` gets the first Ctrl-C (Ray Tune's graceful stop begins), then a
    second inside Ray's own wait for its trials' actors, which Ray's core answers with its plain
    KeyboardInterrupt (``ray._raylet.check_status``), not the handler's (seen in a comparison
    Ctrl-C'd twice: the command said "interrupted" and nothing of how to go on)."""

    def fit(self) -> None:
        signal.signal(signal.SIGUSR1, lambda signum, frame: None)  # Ray's graceful stop
        os.kill(os.getpid(), signal.SIGINT)
        raise KeyboardInterrupt


def test_a_second_ctrl_c_inside_rays_wait_is_the_searchs_unsaved_stop() -> None:
    with pytest.raises(SearchInterrupted) as stopped:
        fit(_SecondCtrlCInRaysWait())
    assert stopped.value.saved is False
