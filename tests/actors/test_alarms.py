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
