"""Deterministic testing kit for trio-mcp servers.

- :func:`open_harness` / :class:`Harness`: your server and a client joined in memory, on
  Trio's autojump mock clock, with :meth:`Harness.settle` (wait for quiescence) and
  :meth:`Harness.advance` (let mock time pass);
- :class:`Trace`: every runtime event in order, with the mock time; ids normalised
  (``task-1``, ``session-1``) so identical runs give byte-identical dumps;
- :func:`explore_cancellation`: cancel a tool's task at each of its checkpoints and check the
  invariants after each run;
- :class:`Faults`: drop, delay or reorder deliveries; make a tool raise at a chosen step;
- :func:`run`: ``trio.run`` on a mock clock with deterministic scheduling;
- a pytest plugin (fixtures ``mcp_harness``, ``mcp_connect``, ``mcp_clock``; see
  ``docs/testing.md``).
"""

from .determinism import DEFAULT_SEED, deterministic_scheduling, run, scheduling_is_controllable
from .explore import ExplorationFailed, ExplorationReport, ExplorationRun, Via, explore_cancellation
from .faults import Delivery, Direction, Faults, Link, ToolFault
from .harness import EPOCH, WATCHDOG, Harness, HarnessTimeout, Pending, open_harness, pinned_wall_clock
from .monitor import Checkpoint, Gate, Work, WorkMonitor
from .probe import CleanupProbe
from .trace import Event, Trace, TraceAssertionError

__all__ = [
    "DEFAULT_SEED",
    "EPOCH",
    "WATCHDOG",
    "Checkpoint",
    "CleanupProbe",
    "Delivery",
    "Direction",
    "Event",
    "ExplorationFailed",
    "ExplorationReport",
    "ExplorationRun",
    "Faults",
    "Gate",
    "Harness",
    "HarnessTimeout",
    "Link",
    "Pending",
    "ToolFault",
    "Trace",
    "TraceAssertionError",
    "Via",
    "Work",
    "WorkMonitor",
    "deterministic_scheduling",
    "explore_cancellation",
    "open_harness",
    "pinned_wall_clock",
    "run",
    "scheduling_is_controllable",
]
