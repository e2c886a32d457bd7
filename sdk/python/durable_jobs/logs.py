"""A handler's log, kept with its attempt: what `ctx.log` is told, and the standard `logging` records
made while the handler runs.

Lines go to the attempt's sink (the worker ships them to the API, which keeps them with the job:
`ListJobLogs`, `jobsctl logs`, the console), bounded per attempt. `ctx.log` lines are kept at every
level; records of other loggers are kept when the process logs them at all (the worker's
JOBS_LOG_LEVEL). Both also reach the process's own log as before.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

# At most this many lines are kept per attempt; past it, lines are counted and one closing line says how
# many were not kept.
JOB_LOG_LINES_PER_ATTEMPT_MAX = 1000
JOB_LOG_MESSAGE_MAX_CHARS = 4000
JOB_LOG_LOGGER_MAX_CHARS = 200
# The logger ctx.log forwards to, so that the worker's own log still carries every line.
JOB_LOGGER_NAME = "durable_jobs.job"
# Marks a record that ctx.log already wrote to the attempt's sink.
_WRITTEN_MARK = "durable_jobs_log_written"


@dataclass(frozen=True)
class LogLine:
    """One line of an attempt's log."""

    at: datetime
    level: str
    logger: str
    message: str


class LogSink(Protocol):
    """Where an attempt's lines go: called from any thread, never blocking."""

    def write(self, line: LogLine) -> None: ...


def clean_line(line: LogLine) -> LogLine:
    """The line as kept: message and logger name cut to their bounds, without NUL."""
    return LogLine(
        line.at,
        line.level[:16],
        line.logger.replace("\x00", "")[:JOB_LOG_LOGGER_MAX_CHARS],
        line.message.replace("\x00", "")[:JOB_LOG_MESSAGE_MAX_CHARS],
    )


@dataclass
class BoundedLog:
    """Counts an attempt's lines against the bound; `closing_line` says how many were not kept."""

    kept: int = 0
    dropped: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def admit(self) -> bool:
        with self._lock:
            if self.kept < JOB_LOG_LINES_PER_ATTEMPT_MAX:
                self.kept += 1
                return True
            self.dropped += 1
            return False

    def closing_line(self) -> LogLine | None:
        if not self.dropped:
            return None
        return LogLine(
            datetime.now(UTC),
            "WARNING",
            "durable_jobs",
            f"{self.dropped} more lines were not kept (at most {JOB_LOG_LINES_PER_ATTEMPT_MAX} per attempt)",
        )


class JobLogger:
    """`ctx.log`: logging's calls (`info("%s done", name)`, `exception(...)`), kept with the attempt."""

    def __init__(self, sink: LogSink | None, extra: dict[str, object]) -> None:
        self._sink = sink
        self._extra = extra
        self._forward = logging.getLogger(JOB_LOGGER_NAME)

    def debug(self, message: str, *args: object, **kwargs: Any) -> None:
        self.log(logging.DEBUG, message, *args, **kwargs)

    def info(self, message: str, *args: object, **kwargs: Any) -> None:
        self.log(logging.INFO, message, *args, **kwargs)

    def warning(self, message: str, *args: object, **kwargs: Any) -> None:
        self.log(logging.WARNING, message, *args, **kwargs)

    def error(self, message: str, *args: object, **kwargs: Any) -> None:
        self.log(logging.ERROR, message, *args, **kwargs)

    def exception(self, message: str, *args: object, **kwargs: Any) -> None:
        """An ERROR line with the exception being handled, its traceback included."""
        kwargs.setdefault("exc_info", True)
        self.log(logging.ERROR, message, *args, **kwargs)

    def log(self, level: int, message: str, *args: object, exc_info: Any = None, **kwargs: Any) -> None:
        text = message % args if args else str(message)
        trace = _traceback_text(exc_info)
        if self._sink is not None:
            self._sink.write(LogLine(datetime.now(UTC), logging.getLevelName(level), JOB_LOGGER_NAME, text + trace))
        extra = {**self._extra, **kwargs.pop("extra", {}), _WRITTEN_MARK: True}
        self._forward.log(level, message, *args, exc_info=exc_info, extra=extra, stacklevel=3, **kwargs)


def _traceback_text(exc_info: Any) -> str:
    if not exc_info:
        return ""
    if isinstance(exc_info, BaseException):
        exc_info = (type(exc_info), exc_info, exc_info.__traceback__)
    elif not isinstance(exc_info, tuple):
        import sys

        exc_info = sys.exc_info()
    if exc_info[0] is None:
        return ""
    return "\n" + "".join(traceback.format_exception(*exc_info)).rstrip()


_current_sink: contextvars.ContextVar[LogSink | None] = contextvars.ContextVar("durable_jobs_log_sink", default=None)


def capturing(sink: LogSink | None) -> AbstractContextManager[None]:
    """Records made in this context (this task or thread, and what they start with its context) go to
    `sink` too, where an AttemptLogHandler is installed."""
    return _Capturing(sink)


class _Capturing:
    """`capturing`'s context manager: a class, since a generator's took twice as long, once per job."""

    __slots__ = ("_sink", "_token")

    def __init__(self, sink: LogSink | None) -> None:
        self._sink = sink

    def __enter__(self) -> None:
        self._token = _current_sink.set(self._sink)

    def __exit__(self, *_: object) -> None:
        _current_sink.reset(self._token)


def capturing_call(sink: LogSink | None, function: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    """`function(*args)` as a call for another thread: it runs in a copy of the caller's context taken
    now (as asyncio.to_thread does; an executor alone would run it in the thread's own), with `sink`
    current."""
    context = contextvars.copy_context()

    def call() -> Any:
        with capturing(sink):
            return function(*args)

    return lambda: context.run(call)


class AttemptLogHandler(logging.Handler):
    """Installed on the root logger of a process that runs handlers: sends each record made inside a
    handler to its attempt's sink (records ctx.log wrote itself are skipped, and so are those of the
    loggers named in `skipped`, and their children: the worker's own)."""

    def __init__(self, skipped: tuple[str, ...] = ()) -> None:
        super().__init__()
        self._skipped = skipped

    def emit(self, record: logging.LogRecord) -> None:
        sink = _current_sink.get()
        if sink is None or getattr(record, _WRITTEN_MARK, False):
            return
        if any(record.name == name or record.name.startswith(name + ".") for name in self._skipped):
            return
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a record that cannot format is kept as its template
            message = str(record.msg)
        if record.exc_info:
            message += _traceback_text(record.exc_info)
        at = datetime.fromtimestamp(record.created, UTC)
        sink.write(LogLine(at, record.levelname, record.name, message))


@contextmanager
def attempt_log_handler_installed(
    level: int | None = None, skipped: tuple[str, ...] = ()
) -> Iterator[AttemptLogHandler]:
    """An AttemptLogHandler on the root logger for the duration (and the root's level, when given)."""
    root = logging.getLogger()
    handler = AttemptLogHandler(skipped)
    previous = root.level
    root.addHandler(handler)
    if level is not None:
        root.setLevel(level)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
