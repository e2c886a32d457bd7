"""Delivery sets: the jobs that together make one version of a resource, and when such a set is complete."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from shared.domain.jobs import Job, JobResult, JobState, NewJob

MEMBERS_MAX = 100
MEMBER_NAME_MAX_CHARS = 128
# One answer's members' jobs and results: under gRPC's default 4 MiB message with room for the rest. A
# set's results may add up to a hundred times the result limit, so a set is read a page at a time.
DELIVERY_SET_PAGE_BYTES = 3 * 1024 * 1024


class FailurePolicy(enum.StrEnum):
    FAIL_SET = "fail_set"
    WAIT_FOR_MANUAL_RETRY = "wait_for_manual_retry"


class SetState(enum.StrEnum):
    IN_PROGRESS = "in_progress"
    COMPLETE = "complete"
    FAILED = "failed"
    WAITING_FOR_RETRY = "waiting_for_retry"
    SUPERSEDED = "superseded"
    DELETED = "deleted"
    # A member's job was removed by retention: the set can no longer be read whole.
    EXPIRED = "expired"


@dataclass(frozen=True)
class NewDeliverySet:
    resource_key: str
    resource_version: int
    members: tuple[tuple[str, NewJob], ...]
    fan_in: NewJob | None
    failure_policy: FailurePolicy


@dataclass(frozen=True)
class SetMember:
    name: str
    job: Job
    # Only when the whole set is COMPLETE.
    result: JobResult | None


@dataclass(frozen=True)
class SetCursor:
    """Where the next page of a set's members starts: after this member name (the fan-in comes last)."""

    set_id: str
    after_name: str
    # The page that issued it carried results (the set was complete): every later page must carry them
    # too, of the same set, or the read fails rather than mix a set's results with nothing.
    with_results: bool


@dataclass(frozen=True)
class DeliverySet:
    """A set as it stands; `members` (and the fan-in, on the last page) are one page of it, at most
    DELIVERY_SET_PAGE_BYTES of jobs and results, and `next_cursor` is where the next page starts."""

    set_id: str
    resource_key: str
    resource_version: int
    failure_policy: FailurePolicy
    state: SetState
    members: tuple[SetMember, ...]
    fan_in: Job | None
    fan_in_result: JobResult | None
    created_at: datetime
    next_cursor: SetCursor | None = None


def set_state(
    policy: FailurePolicy,
    member_states: Iterable[JobState],
    *,
    member_count: int,
    newer_version: bool,
    deleted: bool,
) -> SetState:
    """One rule for every read: a deleted, outdated or partly removed set is never complete, whatever its
    remaining members did."""
    states = list(member_states)
    if deleted:
        return SetState.DELETED
    if len(states) < member_count:
        return SetState.EXPIRED
    if newer_version or JobState.SUPERSEDED in states:
        return SetState.SUPERSEDED
    if all(state is JobState.SUCCEEDED for state in states):
        return SetState.COMPLETE
    if JobState.CANCELLED in states:
        return SetState.FAILED
    if JobState.FAILED in states:
        return SetState.WAITING_FOR_RETRY if policy is FailurePolicy.WAIT_FOR_MANUAL_RETRY else SetState.FAILED
    return SetState.IN_PROGRESS
