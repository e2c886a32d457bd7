"""The handler test helpers under their first import path; the SDK (`durable_jobs.testing`) owns them."""

from durable_jobs.testing import (
    MemoryCheckpointBook,
    MemoryDependencyResults,
    MemoryProgress,
    MemoryReceiptBook,
    context_for,
    run_handler,
)

__all__ = [
    "MemoryCheckpointBook",
    "MemoryDependencyResults",
    "MemoryProgress",
    "MemoryReceiptBook",
    "context_for",
    "run_handler",
]
