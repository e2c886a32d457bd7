"""The API and worker replicas inside the test process: the API's `serve()` and the worker's `run()`,
each on an event loop of its own thread, on loopback ports, over the test's fresh database.

The same servers, interceptors, use-cases and worker loop as `python -m api_service` and
`python -m worker_service`, started in milliseconds instead of a process's second. The stack keeps the
interface of tests/process_fixtures.py's ServiceStack, so a test that checks what a servicer or the
worker loop does moves here by changing its fixture. A test whose point is a process (signals, kills,
pauses, start-up, drain, the entry points) keeps the processes.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path

import pytest
from prometheus_client import disable_created_metrics

from api_service.server import serve
from api_service.settings import ApiSettings
from shared import event_loop
from tests.process_fixtures import (
    FAST_WORKER_ENV,
    STARTUP_TIMEOUT_SECONDS,
    STOP_TIMEOUT_SECONDS,
    WORKER_TOKEN,
    ServiceProcess,
    ServiceStack,
    free_port,
    wait_until,
)
from worker_service.__main__ import run as run_worker
from worker_service.settings import WorkerSettings

# The loggers of the services' packages; a service's records are told apart by the thread they ran on.
SERVICE_LOGGERS = ("api_service", "worker_service", "shared")


class _ThreadLog(logging.Handler):
    """Keeps the records logged on one thread, formatted as the process's log lines would read."""

    def __init__(self, thread_name: str) -> None:
        super().__init__(logging.INFO)
        self.thread_name = thread_name
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        if record.threadName == self.thread_name:
            self.lines.append(self.format(record))


class ServiceThread:
    """One replica on its own thread and event loop; `stop()` sets its stop event (what SIGTERM does to
    a process) and waits for the drain."""

    # Read like a process's: the same /metrics endpoint.
    metrics_text = ServiceProcess.metrics_text
    metric_value = ServiceProcess.metric_value

    def __init__(self, name: str, main: Callable[[asyncio.Event], Awaitable[None]], metrics_port: int) -> None:
        self.name = name
        self.metrics_port = metrics_port
        self._main = main
        self._thread = threading.Thread(target=self._run, name=f"service-{name}-{id(self)}", daemon=True)
        self._log = _ThreadLog(self._thread.name)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self.error: BaseException | None = None

    def start(self) -> None:
        for name in SERVICE_LOGGERS:
            logging.getLogger(name).addHandler(self._log)
        self._thread.start()
        self._started.wait(STARTUP_TIMEOUT_SECONDS)

    def _run(self) -> None:
        try:
            event_loop.run(self._serve(), os.environ)
        except BaseException as exc:  # noqa: BLE001 - kept for the test, as a process's exit status would be
            self.error = exc

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._started.set()
        await self._main(self._stop)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def exited_early(self) -> bool:
        if not self.running:
            pytest.fail(f"{self.name} stopped: {self.error!r}\n{self.log_text()[-3000:]}")
        return False

    def log_text(self) -> str:
        return "\n".join(self._log.lines)

    def stop(self, timeout: float = STOP_TIMEOUT_SECONDS) -> int:
        """0 after a clean drain; fails the test when the replica raised or did not stop in time."""
        if self._loop is not None and self._stop is not None and self.running:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)
        for name in SERVICE_LOGGERS:
            logging.getLogger(name).removeHandler(self._log)
        if self._thread.is_alive():
            pytest.fail(f"{self.name} did not stop within {timeout}s; where it waits:\n{self._where_it_waits()}")
        if self.error is not None:
            raise AssertionError(f"{self.name} failed: {self.error!r}") from self.error
        return 0

    def _where_it_waits(self) -> str:
        """The thread's stack and every task still pending on its loop, as a hung process's dump would show."""
        frame = sys._current_frames().get(self._thread.ident or 0)
        parts = [
            f"stop event set: {self._stop is not None and self._stop.is_set()}",
            "".join(traceback.format_stack(frame)) if frame is not None else "(no frame)",
        ]
        if self._loop is not None:
            for task in asyncio.all_tasks(self._loop):
                text = io.StringIO()
                task.print_stack(file=text)
                parts.append(text.getvalue())
        return "\n".join(parts)


class InProcessStack(ServiceStack):
    """A ServiceStack whose API and workers are ServiceThreads of the test process, listed in its
    `processes` like a process stack's, so that `close()` stops them and a failed test shows their logs."""

    def _settings_env(self, metrics_port: int, env: dict[str, str]) -> dict[str, str]:
        return {
            **os.environ,
            "DATABASE_URL": self.database_url,
            "JOBS_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
            **env,
        }

    def start_api(self, name: str = "api", **env: str) -> ServiceThread:  # type: ignore[override]  # a thread, read like a process
        """Starts an API replica and waits until the stack's API address answers SERVING."""
        metrics_port = free_port()
        settings = ApiSettings.from_env(
            self._settings_env(
                metrics_port,
                {
                    "JOBS_API_LISTEN": self.api_target,
                    "JOBS_TOKENS_FILE": str(self.tokens_file),
                    "JOBS_HEALTH_INTERVAL_SECONDS": "0.2",
                    **env,
                },
            )
        )
        service = self._start(ServiceThread(name, lambda stop: serve(settings, stop), metrics_port))
        wait_until(
            lambda: service.exited_early() or self.health() == "SERVING",
            timeout=STARTUP_TIMEOUT_SECONDS,
            what="the API to serve",
        )
        return service

    def start_worker(  # type: ignore[override]  # a thread, read like a process
        self, name: str, module: str = "worker_service", launcher: Sequence[str] = (), **env: str
    ) -> ServiceThread:
        """Starts a worker replica and waits until it has announced itself, as its process would."""
        assert module == "worker_service" and not launcher, "another entry point or a launcher needs a process"
        metrics_port = free_port()
        settings = WorkerSettings.from_env(
            self._settings_env(
                metrics_port,
                {
                    "JOBS_API_TARGET": self.api_target,
                    "JOBS_WORKER_TOKEN": WORKER_TOKEN,
                    "JOBS_WORKER_ID": name,
                    **FAST_WORKER_ENV,
                    **env,
                },
            )
        )
        service = self._start(ServiceThread(name, lambda stop: run_worker(settings, stop), metrics_port))
        wait_until(
            lambda: service.exited_early() or f"worker {name}:" in service.log_text(),
            timeout=STARTUP_TIMEOUT_SECONDS,
            what=f"worker {name} to start",
        )
        return service

    def _start(self, service: ServiceThread) -> ServiceThread:
        self.processes.append(service)  # type: ignore[arg-type]  # read like a process: stop(), log_text()
        service.start()
        return service


@pytest.fixture
def in_process_stack(database_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[InProcessStack]:
    """Nothing started yet: a test starts the API and the workers it needs, in this process."""
    # As each service's main() does: the scrapes read as a process's would.
    disable_created_metrics()
    for name in SERVICE_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    stack = InProcessStack(database_url, tmp_path)
    try:
        yield stack
    finally:
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            for service in stack.processes:
                print(f"\n----- {service.name} log (tail) -----\n{service.log_text()[-4000:]}")
        stack.close()
