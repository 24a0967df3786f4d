"""Deterministic scheduling for Trio runs, and the runner the kit uses.

Why this exists. With a mock clock and normalised ids, the only thing left that varies
between two runs of the same scenario is Trio's scheduler: each batch of runnable tasks runs
in an order Trio randomises on purpose (reversed or not, using a private ``random.Random``).
When two tasks are runnable at the same instant (say, a ``tasks/cancel`` handler and a
``tasks/result`` waiter, both woken by the same cancellation) the order of their responses on
the wire, and so of the trace, depends on that coin. No view of the trace can hide this
without lying about the wire order, so the kit makes the scheduler itself deterministic.

How. Trio has exactly this switch for Hypothesis: when Hypothesis is imported, Trio's
``hypothesis`` entry-point plugin sets ``trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING``
(batches are then sorted by task creation order before being shuffled) and registers the
scheduler's RNG ``trio._core._run._r`` with Hypothesis, which seeds it for every example.
:func:`deterministic_scheduling` does the same two things for the duration of a ``with``
block (seeding ``_r`` with your seed, and restoring both afterwards). These are private
names: the function checks they exist and, if a future Trio renames them, warns and leaves
scheduling random rather than failing.
"""

from __future__ import annotations

import importlib
import random
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import trio
import trio.testing

__all__ = ["DEFAULT_SEED", "deterministic_scheduling", "run", "scheduling_is_controllable"]

T = TypeVar("T")

DEFAULT_SEED = 0

_FLAG = "_ALLOW_DETERMINISTIC_SCHEDULING"


def _scheduler_module() -> Any:
    try:
        return importlib.import_module("trio._core._run")
    except ImportError:  # pragma: no cover - a future Trio layout
        return None


def scheduling_is_controllable() -> bool:
    """Whether this Trio exposes the scheduler RNG the kit seeds."""
    module = _scheduler_module()
    return module is not None and isinstance(getattr(module, "_r", None), random.Random)


@contextmanager
def deterministic_scheduling(seed: int | None = DEFAULT_SEED) -> Iterator[None]:
    """Make Trio runs started inside the block schedule deterministically for ``seed``.

    ``seed=None`` does nothing (Trio's own randomness stays: useful to shake out order
    assumptions). Not re-entrant across threads; runs in one thread at a time.
    """
    if seed is None:
        yield
        return
    module = _scheduler_module()
    rng = getattr(module, "_r", None) if module is not None else None
    if not isinstance(rng, random.Random) or not hasattr(module, _FLAG):
        warnings.warn(
            "trio_mcp.testing: this Trio version does not expose its scheduler RNG; "
            "scheduling stays random and traces may differ between runs",
            RuntimeWarning,
            stacklevel=3,
        )
        yield
        return
    state = rng.getstate()
    flag = getattr(module, _FLAG)
    setattr(module, _FLAG, True)
    rng.seed(seed)
    try:
        yield
    finally:
        rng.setstate(state)
        setattr(module, _FLAG, flag)


def run(
    async_fn: Callable[..., Awaitable[T]],
    *args: Any,
    seed: int | None = DEFAULT_SEED,
    clock: trio.abc.Clock | None = None,
    instruments: tuple[trio.abc.Instrument, ...] = (),
) -> T:
    """``trio.run(async_fn, *args)`` on a fresh ``MockClock(autojump_threshold=0)`` with
    deterministic scheduling (see :func:`deterministic_scheduling`).

    >>> # trace_text = trio_mcp.testing.run(my_scenario)
    """
    if clock is None:
        clock = trio.testing.MockClock(autojump_threshold=0)
    with deterministic_scheduling(seed):
        return trio.run(async_fn, *args, clock=clock, instruments=instruments)
