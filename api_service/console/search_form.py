"""The job search's query string, both ways: parsed into the AdminService's JobFilter, and the cursor of
the next page."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import UTC, datetime

from multidict import MultiMapping

from shared.domain.admin import JobFilter
from shared.domain.errors import FieldViolation, InvalidArgument
from shared.domain.ids import JobId, TenantId
from shared.domain.jobs import JobState, PageCursor
from shared.domain.submission_rules import is_job_id

PAGE_SIZE_DEFAULT = 50
PAGE_SIZES = (25, 50, 100, 200)


def parse_search(query: MultiMapping[str]) -> JobFilter:
    """States may repeat; labels are `key=value`, one per line or repeated; times are UTC."""
    try:
        states = tuple(JobState(s) for s in query.getall("state", []) if s)
    except ValueError:
        raise InvalidArgument(FieldViolation("state", "is not a job state")) from None
    tenant = _text(query, "tenant")
    return JobFilter(
        tenant=TenantId(tenant) if tenant else None,
        states=states,
        kind=_text(query, "kind"),
        labels=_labels(query),
        resource_key=_text(query, "resource_key"),
        error_text=_text(query, "error"),
        created_after=_time(query, "from"),
        created_before=_time(query, "to"),
    )


def page_size(query: Mapping[str, str]) -> int:
    raw = query.get("size", "")
    return int(raw) if raw.isdigit() and int(raw) in PAGE_SIZES else PAGE_SIZE_DEFAULT


def encode_cursor(cursor: PageCursor) -> str:
    raw = f"{cursor.created_at.isoformat()}|{cursor.job_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(value: str | None) -> PageCursor | None:
    if not value:
        return None
    try:
        raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).decode()
        created_at, job_id = raw.split("|")
        cursor = PageCursor(datetime.fromisoformat(created_at), JobId(job_id))
    except ValueError:
        raise InvalidArgument(FieldViolation("after", "is not a page position this console made")) from None
    if not is_job_id(cursor.job_id):
        raise InvalidArgument(FieldViolation("after", "is not a page position this console made"))
    return cursor


def _text(query: Mapping[str, str], name: str) -> str | None:
    return query.get(name, "").strip() or None


def _labels(query: MultiMapping[str]) -> dict[str, str]:
    labels = {}
    for entry in query.getall("label", []):
        for line in entry.splitlines():
            if not line.strip():
                continue
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                raise InvalidArgument(FieldViolation("label", "must be key=value"))
            labels[key.strip()] = value.strip()
    return labels


def _time(query: Mapping[str, str], name: str) -> datetime | None:
    raw = query.get(name, "").strip()
    if not raw:
        return None
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise InvalidArgument(FieldViolation(name, "must be a date and time (UTC)")) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
