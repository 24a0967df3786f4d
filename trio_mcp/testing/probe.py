"""A cleanup probe: lets a tool under test show that its cleanup ran."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["CleanupProbe"]


class CleanupProbe:
    """Counts acquisitions and releases of whatever a tool must clean up.

    In the tool, call :meth:`acquire` when the resource is taken and :meth:`release` in the
    ``finally`` that gives it back (or wrap the section in ``with probe.held():``). The probe is
    *balanced* when every acquisition was released: the invariant the cancellation explorer
    checks after each run.

    >>> probe = CleanupProbe("temp file")
    >>> probe.acquire(); probe.balanced
    False
    >>> probe.release(); probe.balanced
    True
    """

    def __init__(self, name: str = "cleanup") -> None:
        self.name = name
        self.acquired = 0
        self.released = 0

    def acquire(self) -> None:
        self.acquired += 1

    def release(self) -> None:
        self.released += 1

    @contextmanager
    def held(self) -> Iterator[None]:
        """``acquire()`` on entry, ``release()`` on exit (however the block ends)."""
        self.acquire()
        try:
            yield
        finally:
            self.release()

    @property
    def balanced(self) -> bool:
        return self.acquired == self.released

    def reset(self) -> None:
        self.acquired = self.released = 0

    def __repr__(self) -> str:
        return f"CleanupProbe({self.name!r}, acquired={self.acquired}, released={self.released})"
