"""The preparer thread runs only while the main thread waits on the broker, and has stopped by
the time the main thread goes on (services/ticker/preparer.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from kairos.services.ticker.preparer import WaitPreparer
from tests.helpers import eventually


class Steps:
    """A preparation of many small steps, recording where each ran."""

    def __init__(self, fail_first: bool = False) -> None:
        self.outside = True
        """Set by the test while its main thread is surely outside `waiting()`: from its return
        to the next entry (a step then is a preparer running beside the main thread's work)."""
        self.running = False
        self.steps_inside = 0
        self.steps_outside = 0
        self.calls = 0
        self._fail_first = fail_first
        self.first_step = threading.Event()

    def __call__(self, keep_going: Callable[[], bool]) -> None:
        self.calls += 1
        if self._fail_first and self.calls == 1:
            raise RuntimeError("a schedule that cannot be prepared")
        self.running = True
        try:
            while keep_going():
                if self.outside:
                    self.steps_outside += 1
                else:
                    self.steps_inside += 1
                self.first_step.set()
                time.sleep(0.0002)  # a schedule's preparation, the interpreter's lock released
        finally:
            self.running = False


@pytest.fixture
def steps() -> Steps:
    return Steps()


def _wait_on_the_broker(preparer: WaitPreparer, steps: Steps, seconds: float) -> None:
    steps.outside = False
    with preparer.waiting():
        time.sleep(seconds)  # librdkafka's flush: the lock released
    steps.outside = True


def test_it_prepares_only_while_the_main_thread_waits(steps: Steps) -> None:
    preparer = WaitPreparer(steps, name="prepare-test")
    try:
        steps.outside = False
        with preparer.waiting():
            assert steps.first_step.wait(5), "it prepares inside a window"
        steps.outside = True
        for _ in range(5):
            _wait_on_the_broker(preparer, steps, 0.02)
            assert not steps.running, "the preparer had stopped when waiting() returned"
            # The main thread's own work: the preparer must not run beside it.
            deadline = time.monotonic() + 0.02
            while time.monotonic() < deadline:
                pass
        assert steps.steps_inside > 0
        assert steps.steps_outside == 0
        assert 1 <= steps.calls <= 6, "at most one preparation a window"
    finally:
        preparer.close()


def test_a_window_closed_at_once_still_waits_for_the_step_under_way(steps: Steps) -> None:
    preparer = WaitPreparer(steps, name="prepare-test")
    try:
        steps.outside = False
        with preparer.waiting():
            assert steps.first_step.wait(5)
        steps.outside = True
        assert not steps.running
        assert steps.steps_outside == 0
    finally:
        preparer.close()


def test_a_failed_preparation_leaves_the_next_window_prepared() -> None:
    steps = Steps(fail_first=True)
    preparer = WaitPreparer(steps, name="prepare-test")
    try:
        with preparer.waiting():
            eventually(lambda: steps.calls == 1, message="the failing preparation")
        with preparer.waiting():
            assert steps.first_step.wait(5), "the next window prepares again"
        assert steps.calls == 2
    finally:
        preparer.close()


def test_closing_stops_the_thread(steps: Steps) -> None:
    preparer = WaitPreparer(steps, name="prepare-closing")
    _wait_on_the_broker(preparer, steps, 0.01)
    preparer.close()
    eventually(
        lambda: not any(t.name == "prepare-closing" for t in threading.enumerate()),
        message="the preparer's thread to end",
    )


def test_a_preparer_thread_that_died_does_not_hold_the_main_thread() -> None:
    class Dying:
        def __call__(self, keep_going: Callable[[], bool]) -> None:
            raise SystemExit  # not an Exception: it ends the thread

    preparer = WaitPreparer(Dying(), name="prepare-dying")
    with preparer.waiting():
        time.sleep(0.01)
    with preparer.waiting():
        pass
    preparer.close()
