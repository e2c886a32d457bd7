"""`jobsctl watch` and `result --wait`: follow WatchJob until the job settles, resuming a broken stream
from the last sequence seen, and turn how the job ended into an exit code."""

from __future__ import annotations

import argparse
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TextIO, cast

from durable_jobs import Client
from durable_jobs.errors import DeadlineExceeded
from jobs.v1 import jobs_pb2
from jobsctl.rendering import message_json_line, transition_line, watch_status
from jobsctl.rpc_errors import (
    EXIT_JOB_CANCELLED,
    EXIT_JOB_FAILED,
    EXIT_JOB_OUTCOME_UNKNOWN,
    EXIT_OK,
)

if TYPE_CHECKING:  # commands imports this module
    from jobsctl.commands import Call, Console

# A job in OUTCOME_UNKNOWN waits for a person, so following it stops there too.
EXIT_BY_SETTLED_STATE = {
    jobs_pb2.JOB_STATE_SUCCEEDED: EXIT_OK,
    jobs_pb2.JOB_STATE_FAILED: EXIT_JOB_FAILED,
    jobs_pb2.JOB_STATE_CANCELLED: EXIT_JOB_CANCELLED,
    jobs_pb2.JOB_STATE_SUPERSEDED: EXIT_JOB_CANCELLED,
    jobs_pb2.JOB_STATE_OUTCOME_UNKNOWN: EXIT_JOB_OUTCOME_UNKNOWN,
}


STATUS_REDRAW_SECONDS = 0.1


class WaitTimedOut(Exception):
    """The job did not settle within the allowed time; exits like DEADLINE_EXCEEDED."""


def follow(
    client: Client,
    job_id: str,
    *,
    after_sequence: int = 0,
    max_wait: float | None = None,
    include_progress: bool = False,
) -> Iterator[jobs_pb2.Job]:
    """Yields the job's states until one is settled (that one included), and with `include_progress`
    its progress changes too (under the sequence of the state they belong to): the SDK's watch, which
    resumes a dropped stream from the last sequence seen, as the messages jobsctl prints."""
    try:
        updates = client.watch(
            job_id, after_sequence=after_sequence, include_progress=include_progress, timeout=max_wait
        )
        for job in updates:
            # The SDK's copy of the stubs makes the very same message classes (one descriptor pool).
            yield cast(jobs_pb2.Job, job.proto)
    except DeadlineExceeded:
        if max_wait is None:
            raise
        raise WaitTimedOut(f"job {job_id} did not settle within {max_wait:g}s") from None


class StatusLine:
    """A line redrawn in place on a terminal: the current state, how long it has lasted, a spinner.
    Transition lines are printed above it. On anything but a terminal it draws nothing."""

    def __init__(self, out: TextIO, enabled: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self._out, self._enabled, self._clock = out, enabled, clock
        self._lock = threading.Lock()
        self._job: jobs_pb2.Job | None = None
        self._since = clock()
        self._started = clock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._redraw_until_stopped, daemon=True)

    def __enter__(self) -> StatusLine:
        if self._enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._enabled:
            self._thread.join()
            with self._lock:
                self._out.write("\r\033[K")
                self._out.flush()

    def update(self, job: jobs_pb2.Job) -> None:
        """A transition gets a line of its own; a progress change alone redraws the status line on a
        terminal, and elsewhere (a log, a pipe) gets a line too, since nothing else would show it."""
        if self._job is not None and job.sequence == self._job.sequence and job.state == self._job.state:
            self._progress(job)
        else:
            self.transition(job)

    def _progress(self, job: jobs_pb2.Job) -> None:
        with self._lock:
            self._job = job
            if not self._enabled:
                self._out.write(transition_line(job, self._clock() - self._started) + "\n")
                self._out.flush()

    def transition(self, job: jobs_pb2.Job) -> None:
        with self._lock:
            if self._enabled:
                self._out.write("\r\033[K")
            now = self._clock()
            self._out.write(transition_line(job, now - self._started) + "\n")
            self._out.flush()
            self._job, self._since = job, now

    def _redraw_until_stopped(self) -> None:
        for frame in itertools.cycle("|/-\\"):
            if self._stop.wait(STATUS_REDRAW_SECONDS):
                return
            with self._lock:
                if self._job is not None:
                    now = self._clock()
                    status = watch_status(self._job, now - self._since, now - self._started)
                    self._out.write(f"\r\033[K{frame} {status}")
                    self._out.flush()


def run_watch(call: Call, args: argparse.Namespace, console: Console) -> int:
    settled: jobs_pb2.Job | None = None
    updates = follow(
        call.jobs,
        args.job_id,
        after_sequence=args.after_sequence,
        max_wait=args.max_wait,
        include_progress=True,
    )
    if args.output == "json":
        for settled in updates:
            print(message_json_line(settled), file=console.stdout, flush=True)
    else:
        with StatusLine(console.stdout, enabled=console.stdout.isatty()) as status:
            for settled in updates:
                status.update(settled)
    if settled is None:  # resumed after the job had already settled: nothing new to show
        request = jobs_pb2.GetJobRequest(job_id=args.job_id)
        settled = call.stub.GetJob(request, timeout=call.timeout, metadata=call.metadata)
    return EXIT_BY_SETTLED_STATE.get(settled.state, EXIT_OK)
