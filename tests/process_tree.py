"""A process and everything it started, as fault tests find, freeze and kill them: by parentage, since
PostgreSQL's backends and auxiliary processes each start a session of their own and a process group
reaches none of them."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def processes_under(pid: int) -> set[int]:
    """`pid` and every process descended from it. A process group would not do: PostgreSQL's backends
    and auxiliary processes each start a session of their own."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        # The command name in parentheses may hold spaces; the parent's id is the second field after it.
        parent = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        found.add(current)
        todo.extend(children.get(current, []))
    return found


def running(pid: int) -> bool:
    """Whether the process exists and has not exited (a zombie waits only to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def signal_every_process(pid: int, sig: int) -> set[int]:
    """Sends `sig` to the whole tree under `pid` as one event: the tree is stopped first (a stopped
    process forks nothing, and its children are not handed to init while it lives), walked again until
    no process is new, and only then given `sig`. Returns the processes signalled."""
    stopped: set[int] = set()
    while new := processes_under(pid) - stopped:
        for process in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process, signal.SIGSTOP)
        stopped |= new
    if sig != signal.SIGSTOP:
        for process in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process, sig)
    return stopped
