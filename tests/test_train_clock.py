"""export.train_clock: a training budget is not charged for the time the process was stopped."""
import pytest

from export.train_clock import MAX_STALLS, STALL_SECONDS, TrainingClock


class FakeTime:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def run(clock: TrainingClock, now: FakeTime, steps) -> None:
    for dt in steps:
        now.t += dt
        clock.tick()


def test_steady_steps_are_charged_in_full():
    now = FakeTime()
    clock = TrainingClock(spent=60.0, now=now)
    run(clock, now, [0.5, 0.7, 0.6, 2.0])  # a slow batch is not a stall
    assert clock.spent == pytest.approx(63.8)
    assert clock.stalled_seconds == 0.0


def test_a_stopped_step_is_charged_a_typical_step():
    now = FakeTime()
    clock = TrainingClock(now=now)
    run(clock, now, [1.0] * 9 + [600.0, 1.0])  # SIGSTOP for ten minutes during step 10
    assert clock.spent == 11.0
    assert clock.stalled_seconds == 599.0


def test_long_steps_are_not_stalls_without_a_history_or_below_the_floor():
    now = FakeTime()
    clock = TrainingClock(now=now)
    run(clock, now, [STALL_SECONDS * 3])  # the first step: nothing to compare with
    run(clock, now, [STALL_SECONDS * 3])  # as slow as the steps before it
    assert clock.spent == STALL_SECONDS * 6
    fast = TrainingClock(now=now)
    run(fast, now, [0.01] * 5 + [STALL_SECONDS * 0.9])  # 90x the median, but under the floor
    assert abs(fast.spent - (0.05 + STALL_SECONDS * 0.9)) < 1e-9


def test_time_between_ticks_charged_elsewhere_is_forgotten():
    now = FakeTime()
    clock = TrainingClock(now=now)
    run(clock, now, [1.0, 1.0])
    now.t += 30.0  # an evaluation, timed by the caller
    clock.add(30.0)
    run(clock, now, [1.0])
    assert clock.spent == 33.0


def test_a_machine_that_got_slower_is_charged_after_a_few_long_steps():
    now = FakeTime()
    clock = TrainingClock(now=now)
    run(clock, now, [1.0] * 10 + [60.0] * (MAX_STALLS + 3))
    # the first MAX_STALLS long steps look like stops; the rest are charged whole
    assert clock.spent == pytest.approx(10.0 + MAX_STALLS * 1.0 + 3 * 60.0)
    run(clock, now, [60.0])  # now typical: no longer a stall
    assert clock.spent == pytest.approx(10.0 + MAX_STALLS * 1.0 + 4 * 60.0)
