"""`python -m tests.worker_without_opentelemetry`: a worker replica in a process where no opentelemetry
module can be imported, as on an install without the `tracing` extra."""

from __future__ import annotations

import runpy
import sys

# A None entry makes `import opentelemetry` and every submodule import raise ImportError.
sys.modules["opentelemetry"] = None  # type: ignore[assignment]

if __name__ == "__main__":
    runpy.run_module("worker_service", run_name="__main__", alter_sys=True)
