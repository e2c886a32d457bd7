"""How large a job's result may be: one rule, for the worker that sends it and the API that stores it."""

from __future__ import annotations

# A result travels in a CompleteJobs call and back in GetJobResult, GetLatestResult, a delivery set's
# page and a dependent's dependency results: half of gRPC's default 4 MiB message leaves every one of
# them room for its envelope. Both services read JOBS_MAX_RESULT_BYTES; give them the same value.
RESULT_LIMIT_BYTES_DEFAULT = 2 * 1024 * 1024
RESULT_LIMIT_SETTING = "JOBS_MAX_RESULT_BYTES"


def result_too_large(size: int, max_bytes: int) -> str | None:
    """The attempt's failure message when a result of `size` bytes is over the limit; None when it fits.
    Such an attempt fails PERMANENT: running the job again would return as much again."""
    if size <= max_bytes:
        return None
    return (
        f"the result is {size} bytes, over the maximum of {max_bytes} bytes ({RESULT_LIMIT_SETTING}):"
        " store large output elsewhere and return a reference to it"
    )
