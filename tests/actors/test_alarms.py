"""``Alarms``: callbacks at deadlines from one Trio task, in place of a cancel scope per wait
(the auto-task window of a server-directed call)."""

from __future__ import annotations

import trio
import trio.testing

from trio_mcp.actors.runtime import Alarms


async def test_alarms_ring_at_their_deadlines_in_order(autojump_clock: trio.testing.MockClock) -> None:
    alarms = Alarms()
    rang: list[tuple[str, float]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(alarms.run)
        start = trio.current_time()
        alarms.add(start + 3, lambda: rang.append(("c", trio.current_time() - start)))
        alarms.add(start + 1, lambda: rang.append(("a", trio.current_time() - start)))
        await trio.sleep(0.5)
        # Added while the task sleeps toward a later deadline: it wakes earlier for this one.
        alarms.add(start + 2, lambda: rang.append(("b", trio.current_time() - start)))
        await trio.sleep(10)
        nursery.cancel_scope.cancel()
    assert rang == [("a", 1), ("b", 2), ("c", 3)]
    assert alarms.pending == 0


async def test_a_withdrawn_alarm_never_rings_and_is_not_kept(autojump_clock: trio.testing.MockClock) -> None:
    alarms = Alarms()
    rang: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(alarms.run)
        start = trio.current_time()
        first = alarms.add(start + 1, lambda: rang.append("first"))
        alarms.add(start + 2, lambda: rang.append("second"))
        alarms.withdraw(first)
        assert alarms.pending == 1  # withdrawn from the front: dropped at once
        await trio.sleep(1.5)
        assert rang == []
        await trio.sleep(1)
        assert rang == ["second"]
        alarms.withdraw(first)  # again, or after it would have rung: nothing
        nursery.cancel_scope.cancel()


async def test_a_failing_callback_does_not_stop_the_others(autojump_clock: trio.testing.MockClock) -> None:
    alarms = Alarms()
    rang: list[str] = []

    def broken() -> None:
        raise RuntimeError("bug")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(alarms.run)
        start = trio.current_time()
        alarms.add(start + 1, broken)
        alarms.add(start + 1, lambda: rang.append("after"))
        await trio.sleep(2)
        nursery.cancel_scope.cancel()
    assert rang == ["after"]


class _Wakes(trio.abc.Instrument):
    """Counts the scheduler steps of the task named ``name``, while counting (``with``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name == self.name:
            self.steps += 1

    def __enter__(self) -> _Wakes:
        trio.lowlevel.add_instrument(self)
        return self

    def __exit__(self, *exc: object) -> None:
        trio.lowlevel.remove_instrument(self)


async def test_alarms_added_and_withdrawn_without_pause_wake_the_task_at_most_once_per_delay(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Quick waits overlapping on many connections: each alarm (due 50 ms after it is set) is
    withdrawn 10 ms later, a new one every 2 ms for a second. None rings; the Trio task, whose
    wake-up is not moved for every withdrawal, wakes early to find nothing due, at most once
    per 40 ms (the delay less the time an alarm is kept: what is left of the front one's
    when it wakes), instead of 1,000 moves of its wake-up; once they stop it sleeps for good."""
    alarms = Alarms()
    rang: list[int] = []
    wakes = _Wakes("alarms")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(alarms.run, name="alarms")
        await trio.sleep(1)

        async def quick(k: int) -> None:
            alarm = alarms.add(trio.current_time() + 0.05, lambda: rang.append(k))
            await trio.sleep(0.01)
            alarms.withdraw(alarm)

        with wakes:
            async with trio.open_nursery() as waits:
                for k in range(500):
                    waits.start_soon(quick, k)
                    await trio.sleep(0.002)
            during = wakes.steps
            assert alarms.pending == 0  # the last withdrawn: nothing kept
            await trio.sleep(10)
            after = wakes.steps - during
        nursery.cancel_scope.cancel()
    assert rang == []
    assert 1 <= during <= 1 / 0.04 + 2
    assert after == 0


async def test_a_withdrawn_front_leaves_the_wake_up_while_others_are_kept(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The front alarm withdrawn while a later one is kept: the task wakes at the withdrawn
    one's deadline, finds nothing due, and the later one still rings at its own."""
    alarms = Alarms()
    rang: list[float] = []
    wakes = _Wakes("alarms")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(alarms.run, name="alarms")
        await trio.sleep(0.5)
        start = trio.current_time()
        first = alarms.add(start + 1, lambda: rang.append(-1))
        alarms.add(start + 3, lambda: rang.append(trio.current_time() - start))
        alarms.withdraw(first)
        with wakes:
            await trio.sleep(1.5)
            assert wakes.steps == 1 and rang == []  # woke at 1 for nothing
            await trio.sleep(2)
        nursery.cancel_scope.cancel()
    assert rang == [3]
