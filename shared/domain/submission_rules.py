"""What a well-formed submission looks like. Every violation names its field."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from shared.domain.errors import FieldViolation, InvalidArgument, ViolationCollector
from shared.domain.jobs import NewJob, PlainBatch
from shared.domain.limit_keys import parse_submission_keys

KIND_PATTERN = re.compile(r"^[a-z][a-z0-9._-]*$")
LABEL_KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
PAYLOAD_LIMIT_BYTES_DEFAULT = 1024 * 1024
PRIORITY_RANGE = (-1000, 1000)
MAX_ATTEMPTS_LIMIT = 100
# How many known kinds an unknown kind's error names.
KINDS_LISTED_MAX = 50
# How long a SUCCEEDED job still takes in an identical submission that asks for de-duplication.
DEDUPE_WINDOW_SECONDS_DEFAULT = 600.0
# The longest a debounced job waits, for quiet or in all.
DEBOUNCE_WAIT_MAX_SECONDS = 7 * 24 * 3600.0


@dataclass(frozen=True)
class SubmissionLimits:
    max_payload_bytes: int = PAYLOAD_LIMIT_BYTES_DEFAULT
    max_kind_chars: int = 128
    max_idempotency_key_chars: int = 256
    max_resource_key_chars: int = 512
    # sequence_key, singleton_key and debounce.key
    max_job_key_chars: int = 256
    max_labels: int = 32
    max_label_key_chars: int = 63
    max_label_value_chars: int = 256
    max_dependencies: int = 100
    max_batch_size: int = 1000


def check_text(violations: ViolationCollector, name: str, value: str, max_chars: int) -> None:
    """Rejects NUL and other C0 control characters, and strings over the limit."""
    if len(value) > max_chars:
        violations.add(name, f"must be at most {max_chars} characters")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        violations.add(name, "must not contain NUL or control characters")


# A job id as the service writes it: a UUID in lowercase hex with hyphens (what str(uuid.UUID) gives).
_JOB_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_job_id(value: str) -> bool:
    """Checked for every id of every report batch: a pattern, five times faster than parsing a UUID."""
    return _JOB_ID.fullmatch(value) is not None


def are_job_ids(values: Iterable[str]) -> bool:
    """is_job_id of each, without a Python call per value (a report batch holds up to a thousand)."""
    return all(map(_JOB_ID.fullmatch, values))


def check_job_id(value: str, field_name: str = "job_id") -> None:
    """Raises InvalidArgument unless `value` is shaped like a job id."""
    if not is_job_id(value):
        raise InvalidArgument(FieldViolation(field_name, "must be a job id returned by SubmitJob"))


def validate_new_job(
    job: NewJob,
    *,
    limits: SubmissionLimits,
    known_kinds: Collection[str],
    prefix: str = "",
) -> None:
    """Raises InvalidArgument listing every problem of one submission."""
    v = ViolationCollector(prefix=prefix)
    _check_kind(v, job.kind, limits, known_kinds)
    if len(job.payload) > limits.max_payload_bytes:
        v.add("payload", f"must be at most {limits.max_payload_bytes} bytes")
    if job.idempotency_key is not None:
        check_text(v, "idempotency_key", job.idempotency_key, limits.max_idempotency_key_chars)
    if not PRIORITY_RANGE[0] <= job.priority <= PRIORITY_RANGE[1]:
        v.add("priority", f"must be between {PRIORITY_RANGE[0]} and {PRIORITY_RANGE[1]}")
    if not 0 <= job.max_attempts <= MAX_ATTEMPTS_LIMIT:
        v.add("max_attempts", f"must be between 0 (the kind's default) and {MAX_ATTEMPTS_LIMIT}")
    if job.dedupe_by_input and job.idempotency_key is not None:
        # A submission that attaches to another job stores no key, so a replay could not promise that job.
        v.add("dedupe_by_input", "cannot be combined with idempotency_key")
    _check_resource(v, job, limits)
    _check_keyed(v, job, limits)
    _check_dependencies(v, job, limits)
    _check_labels(v, job.labels, limits)
    parse_submission_keys(job.limit_keys, v)
    if job.deadline is not None and job.run_after is not None and job.deadline <= job.run_after:
        v.add("deadline", "must be later than run_after")
    v.raise_if_any()


def plain_batch_passes(batch: PlainBatch, *, limits: SubmissionLimits, known_kinds: Collection[str]) -> bool:
    """Whether every submission of the batch passes validate_new_job, decided column by column: each kind
    once, the extremes of the numbers, labels and times only where given. False when one may not: the
    caller then runs validate_new_job on each, which names the problem."""
    kinds_pass = all(
        kind in known_kinds and len(kind) <= limits.max_kind_chars and KIND_PATTERN.fullmatch(kind)
        for kind in set(batch.kinds)
    )
    if not kinds_pass or max(map(len, batch.payloads)) > limits.max_payload_bytes:
        return False
    if not PRIORITY_RANGE[0] <= min(batch.priorities) <= max(batch.priorities) <= PRIORITY_RANGE[1]:
        return False
    if not 0 <= min(batch.max_attempts) <= max(batch.max_attempts) <= MAX_ATTEMPTS_LIMIT:
        return False
    for labels in filter(None, batch.labels):
        v = ViolationCollector()
        _check_labels(v, labels, limits)
        if v.violations:
            return False
    return all(
        deadline > run_after
        for deadline, run_after in zip(batch.deadlines, batch.run_afters, strict=True)
        if deadline is not None and run_after is not None
    )


def _check_kind(v: ViolationCollector, kind: str, limits: SubmissionLimits, known: Collection[str]) -> None:
    if not kind:
        v.add("kind", "is required")
    elif len(kind) > limits.max_kind_chars or not KIND_PATTERN.fullmatch(kind):
        v.add("kind", f"must match {KIND_PATTERN.pattern} and be at most {limits.max_kind_chars} characters")
    elif kind not in known:
        v.add("kind", f"is not a registered job kind; known kinds: {_kinds_listed(known)}")


def _kinds_listed(known: Collection[str]) -> str:
    """Sorted, and cut short: a deployment may register hundreds, and the message goes to a terminal."""
    if not known:
        return "none yet"
    names = sorted(known)
    shown = ", ".join(names[:KINDS_LISTED_MAX])
    return shown if len(names) <= KINDS_LISTED_MAX else f"{shown} and {len(names) - KINDS_LISTED_MAX} more"


def _check_resource(v: ViolationCollector, job: NewJob, limits: SubmissionLimits) -> None:
    version = job.resource_version or 0
    if job.resource_key:
        check_text(v, "resource_key", job.resource_key, limits.max_resource_key_chars)
        if version < 1:
            v.add("resource_version", "must be at least 1 when resource_key is set")
    elif version != 0:
        v.add("resource_version", "must be 0 unless resource_key is set")


def _check_keyed(v: ViolationCollector, job: NewJob, limits: SubmissionLimits) -> None:
    """Sequence, singleton and debounce keys. A singleton or debounced submission may answer with another
    submission's job, so, as with dedupe_by_input, it carries no idempotency key that a replay could hold to."""
    for name, key in (("sequence_key", job.sequence_key), ("singleton_key", job.singleton_key)):
        if key is not None:
            _check_key(v, name, key, limits)
    if job.debounce is not None:
        _check_key(v, "debounce.key", job.debounce.key, limits)
        quiet, longest = job.debounce.quiet_seconds, job.debounce.max_wait_seconds
        if not 0 < quiet <= DEBOUNCE_WAIT_MAX_SECONDS:
            v.add("debounce.quiet_seconds", f"must be more than 0 and at most {DEBOUNCE_WAIT_MAX_SECONDS:.0f}")
        if not quiet <= longest <= DEBOUNCE_WAIT_MAX_SECONDS:
            v.add(
                "debounce.max_wait_seconds",
                f"must be at least quiet_seconds and at most {DEBOUNCE_WAIT_MAX_SECONDS:.0f}",
            )
    collapsing = [
        name
        for name, given in (("singleton_key", job.singleton_key is not None), ("debounce", job.debounce is not None))
        if given
    ]
    for name in collapsing:
        if job.idempotency_key is not None:
            v.add(name, "cannot be combined with idempotency_key: the answer may be another submission's job")
        if job.dedupe_by_input:
            v.add(name, "cannot be combined with dedupe_by_input")
    if len(collapsing) == 2:
        v.add("debounce", "cannot be combined with singleton_key")


def _check_key(v: ViolationCollector, name: str, key: str, limits: SubmissionLimits) -> None:
    if not key:
        v.add(name, "must not be empty")
    check_text(v, name, key, limits.max_job_key_chars)


def _check_dependencies(v: ViolationCollector, job: NewJob, limits: SubmissionLimits) -> None:
    if len(job.depends_on) > limits.max_dependencies:
        v.add("depends_on", f"must list at most {limits.max_dependencies} jobs")
    for index, job_id in enumerate(job.depends_on):
        if not is_job_id(job_id):
            v.add(f"depends_on[{index}]", "must be a job id returned by SubmitJob")
    if len(set(job.depends_on)) != len(job.depends_on):
        v.add("depends_on", "must not repeat a job id")


def _check_labels(v: ViolationCollector, labels: dict[str, str], limits: SubmissionLimits) -> None:
    if len(labels) > limits.max_labels:
        v.add("labels", f"must have at most {limits.max_labels} entries")
    for key, value in labels.items():
        if not key or len(key) > limits.max_label_key_chars or not LABEL_KEY_PATTERN.fullmatch(key):
            v.add(f"labels[{key[:64]!r}]", "key must match [A-Za-z0-9][A-Za-z0-9._/-]* (at most 63 characters)")
        check_text(v, f"labels[{key[:64]!r}]", value, limits.max_label_value_chars)
