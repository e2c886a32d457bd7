"""`make dev-worker MODULES=my_jobs`: one worker with your job kinds beside a running `make run`, started
again whenever one of your files changes.

The stack keeps running (API, database, its two workers with the built-in kinds); only this worker
restarts, with a short drain, so an edit is live in a second or two. It finds the stack through
.dev/stack.toml (JOBS_DEV_DIR moves it), which `make run` writes while it runs, and watches the files of
the modules it loads (a package's whole directory) plus any --watch path. The worker's output, your
handlers' logs included, is printed here. A module that fails to import is reported and the next change
is awaited, instead of ending the loop. Ctrl-C stops the worker and the loop.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import tomllib
from collections.abc import Sequence
from pathlib import Path

import watchfiles

REPO = Path(__file__).resolve().parent.parent
# Short: a restart should not wait for a job of the old code to finish; its lease is handed back.
DEV_WORKER_GRACE_SECONDS = 2.0
STOP_MARGIN_SECONDS = 10.0
DEV_WORKER_ID = "dev-modules"


class DevWorkerError(Exception):
    """The loop cannot start; the message says why and what to do."""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    modules = [m.strip() for m in (args.modules or os.environ.get("JOBS_HANDLER_MODULES", "")).split(",") if m.strip()]
    try:
        if not modules:
            raise DevWorkerError("name your handler modules: make dev-worker MODULES=my_jobs (comma-separated)")
        env = _worker_env(_dev_dir(), modules)
        watched = sorted({*_module_paths(modules), *(Path(p).resolve() for p in args.watch)})
    except DevWorkerError as exc:
        print(f"dev worker: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"dev worker: {', '.join(modules)}; watching {', '.join(map(str, watched))}", flush=True)
    worker, reported = _start(env), False
    try:
        # A timeout every second too, to notice a worker that exited (a module that does not import).
        for changes in watchfiles.watch(
            *watched, stop_event=stop, debounce=300, rust_timeout=1000, yield_on_timeout=True, raise_interrupt=False
        ):
            if not changes:
                if worker.poll() is not None and not reported:
                    print(f"dev worker: the worker exited ({worker.returncode}); waiting for a change", flush=True)
                    reported = True
                continue
            changed = sorted({Path(path).name for _, path in changes})
            print(f"dev worker: {', '.join(changed)} changed; restarting the worker", flush=True)
            _stop_worker(worker)
            worker, reported = _start(env), False
    finally:
        _stop_worker(worker)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="make dev-worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", help="handler modules, comma-separated (default: JOBS_HANDLER_MODULES)")
    parser.add_argument("--watch", action="append", default=[], help="another file or folder to watch")
    return parser


def _dev_dir() -> Path:
    return Path(os.environ["JOBS_DEV_DIR"]).resolve() if os.environ.get("JOBS_DEV_DIR") else REPO / ".dev"


def _worker_env(dev_dir: Path, modules: list[str]) -> dict[str, str]:
    try:
        with (dev_dir / "stack.toml").open("rb") as stack_file:
            stack = tomllib.load(stack_file)
        with (dev_dir / "dev-tokens.toml").open("rb") as tokens_file:
            tokens = tomllib.load(tokens_file)
    except FileNotFoundError:
        raise DevWorkerError(f"no running stack found in {dev_dir}: start `make run` first, then this") from None
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise DevWorkerError(f"cannot read the stack's files in {dev_dir}: {exc}") from None
    return {
        **os.environ,
        "DATABASE_URL": stack["database_url"],
        "JOBS_API_TARGET": stack["api_target"],
        "JOBS_WORKER_TOKEN": tokens["worker_token"],
        "JOBS_WORKER_ID": os.environ.get("JOBS_WORKER_ID", DEV_WORKER_ID),
        "JOBS_HANDLER_MODULES": ",".join(modules),
        "JOBS_SHUTDOWN_GRACE_SECONDS": os.environ.get("JOBS_SHUTDOWN_GRACE_SECONDS", str(DEV_WORKER_GRACE_SECONDS)),
        "PYTHONUNBUFFERED": "1",
    }


def _module_paths(modules: list[str]) -> list[Path]:
    """Each module's file, or a package's folder, found without importing it (an import would run
    the user's code in this process, and a broken module would stop the loop)."""
    paths = []
    for name in modules:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError) as exc:
            raise DevWorkerError(f"cannot find module {name!r}: {exc}") from None
        if spec is None or spec.origin is None:
            raise DevWorkerError(f"cannot find module {name!r}: install your package into .venv (pip install -e)")
        locations = list(spec.submodule_search_locations or [])
        paths += [Path(p).resolve() for p in locations] if locations else [Path(spec.origin).resolve()]
    return paths


def _start(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "worker_service"], env=env, stdin=subprocess.DEVNULL)


def _stop_worker(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(DEV_WORKER_GRACE_SECONDS + STOP_MARGIN_SECONDS)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


if __name__ == "__main__":
    sys.exit(main())
