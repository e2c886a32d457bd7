"""Delivery sets: the jobs that together make one version of a resource, and when such a set is complete."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from shared.domain.jobs import Job, JobResult, JobState, NewJob

MEMBERS_MAX = 100
MEMBER_NAME_MAX_CHARS = 128


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
class DeliverySet:
    set_id: str
    resource_key: str
    resource_version: int
    failure_policy: FailurePolicy
    state: SetState
    members: tuple[SetMember, ...]
    fan_in: Job | None
    fan_in_result: JobResult | None
    created_at: datetime


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
