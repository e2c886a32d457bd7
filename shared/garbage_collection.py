"""The pace of the cyclic garbage collector in the service's processes.

Each job makes a few dozen short-lived objects in the API and in a worker (rows, messages, a task and its
context). At the interpreter's default, a young-generation pass every 700 net allocations, those passes
ran many times per batch and found next to nothing to free: about 2 us of each process's CPU per job in a
work-down at 14,000 jobs/s (docs/PERFORMANCE.md). A pass every 10,000 allocations is the same collector,
freeing the same cycles a little later; the older generations keep their default ratios.
"""

from __future__ import annotations

import gc

YOUNG_GENERATION_THRESHOLD = 10_000


def pace_garbage_collector() -> None:
    """Called once at a process's start, before it serves."""
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, oldest)
