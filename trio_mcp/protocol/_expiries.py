"""When a supervisor's tasks expire: task ids filed by deadline, in buckets of a millisecond.

No Trio here: the supervisor reads its clock and arms its timer; this only files and hands
back ids. A deadline is rounded *up* to the end of its millisecond, so a task expires at most
1 ms after its TTL, never before. Tasks created together with one TTL share a bucket: a live
task costs a slot in a list (8 bytes), where a heap of ``(deadline, task id)`` entries costs a
tuple and a float per task (some 90 bytes with their allocation); a bucket of one task holds
its id alone (a dict entry, the tick and a heap slot: about 75 bytes), so a task created on its
own costs no more than in that heap. The buckets' ticks are kept in a heap, so filing is O(1)
for an existing bucket and O(log b) for a new one (b buckets), and each bucket is handed back
once, whole, when it is due.

>>> expiries = Expiries()
>>> expiries.add("a", 10.0002), expiries.add("b", 10.0004), expiries.add("c", 9.5)
(10.001, 10.001, 9.5)
>>> expiries.earliest
9.5
>>> expiries.pop_due(10.0), expiries.pop_due(10.001), len(expiries)
(['c'], ['a', 'b'], 0)
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection

__all__ = ["TICKS_PER_SECOND", "Expiries"]

TICKS_PER_SECOND = 1000
"""A bucket's width is one tick: a millisecond."""


class Expiries:
    """Task ids by the tick their deadline ends in (see the module docstring). Removing a task
    is lazy: its id stays filed until its bucket is due, or until :meth:`compact` drops the ids
    of tasks no longer kept once they are half of all filed."""

    __slots__ = ("_buckets", "_count", "_ticks")

    def __init__(self) -> None:
        self._buckets: dict[int, str | list[str]] = {}  # one id alone, or a list of them
        self._ticks: list[int] = []  # a heap of the keys of _buckets
        self._count = 0  # ids filed, over all buckets

    def __len__(self) -> int:
        """Ids filed (a removed task's id counts until it is dropped)."""
        return self._count

    def add(self, task_id: str, deadline: float) -> float:
        """File ``task_id`` to expire at ``deadline``; the time it will be due (the end of the
        deadline's millisecond: the same float :attr:`earliest` gives for its bucket)."""
        tick = math.ceil(deadline * TICKS_PER_SECOND)
        buckets = self._buckets
        bucket = buckets.get(tick)
        if bucket is None:
            buckets[tick] = task_id
            heapq.heappush(self._ticks, tick)
        elif type(bucket) is str:
            buckets[tick] = [bucket, task_id]
        else:
            bucket.append(task_id)  # type: ignore[union-attr]
        self._count += 1
        return tick / TICKS_PER_SECOND

    @property
    def earliest(self) -> float:
        """When the next bucket is due (``math.inf`` if none)."""
        return self._ticks[0] / TICKS_PER_SECOND if self._ticks else math.inf

    def pop_due(self, now: float) -> list[str]:
        """Every id due at ``now``, earliest bucket first; they are filed no more."""
        ticks = self._ticks
        out: list[str] = []
        while ticks and ticks[0] / TICKS_PER_SECOND <= now:
            bucket = self._buckets.pop(heapq.heappop(ticks))
            if type(bucket) is str:
                out.append(bucket)
            else:
                out += bucket
        self._count -= len(out)
        return out

    def compact(self, kept: Collection[str]) -> None:
        """Drop the ids not in ``kept`` once they are half of all filed (amortised O(1) per
        removal): what is filed stays within about twice what is kept."""
        if self._count <= 2 * len(kept) + 64:
            return
        buckets: dict[int, str | list[str]] = {}
        count = 0
        for tick, bucket in self._buckets.items():
            left = [bucket] if type(bucket) is str else bucket
            left = [task_id for task_id in left if task_id in kept]
            if left:
                buckets[tick] = left[0] if len(left) == 1 else left
                count += len(left)
        self._buckets = buckets
        self._ticks = list(buckets)
        heapq.heapify(self._ticks)
        self._count = count
