"""The handler test helpers under their first import path; the SDK (`durable_jobs.testing`) owns them."""

from durable_jobs.testing import (
    MemoryCheckpointBook,
    MemoryDependencyResults,
    MemoryLog,
    MemoryProgress,
    MemoryReceiptBook,
    context_for,
    run_handler,
    run_handler_async,
)

__all__ = [
    "MemoryCheckpointBook",
    "MemoryDependencyResults",
    "MemoryLog",
    "MemoryProgress",
    "MemoryReceiptBook",
    "context_for",
    "run_handler",
    "run_handler_async",
]
