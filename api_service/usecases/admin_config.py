"""What operators set for scheduling: limits by key, tenant weights, paused and retired kinds.

Transport-free: the gRPC AdminService and a console call these with domain types, the acting operator
and the reason passed explicitly. Each change and its record in admin_actions commit together, so no
change is ever made without the record of who made it and why."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from shared.domain.admin import (
    LIMIT_KEY_MAX_CHARS,
    Actor,
    KindStatus,
    Limit,
    LimitSpec,
    TenantWeight,
    check_limit_spec,
    check_name,
    check_reason,
    check_weight,
)
from shared.domain.errors import FieldViolation, InvalidArgument, ViolationCollector
from shared.domain.ids import TenantId
from shared.domain.submission_rules import SubmissionLimits
from shared.storage import admin_store, kind_store
from shared.storage.database import Connection, Database

log = logging.getLogger(__name__)
# Replicas seen within this long count as a kind's publishers: three of the workers' default publish
# intervals (30 s), the window their own conflict metric uses.
PUBLISHERS_RECENT_SECONDS_DEFAULT = 90.0


class AdminConfig:
    def __init__(self, db: Database, *, publishers_recent_seconds: float = PUBLISHERS_RECENT_SECONDS_DEFAULT) -> None:
        self._db = db
        self._recent = publishers_recent_seconds

    async def set_limit(self, actor: Actor, spec: LimitSpec, reason: str) -> Limit:
        """Creates or replaces the key's limit; the claim applies it from its next statement on."""
        violations = ViolationCollector()
        check_limit_spec(violations, spec)
        check_reason(violations, reason, required=False)
        violations.raise_if_any()
        async with self._db.transaction() as conn:
            limit = await admin_store.set_limit(conn, spec, actor.name)
            details = {"max_running": spec.max_running, "rate_per_second": spec.rate_per_second, "burst": spec.burst}
            await _record(conn, actor, "set_limit", spec.key, reason, details)
        log.info("limit set", extra={"actor": actor.name, "key": spec.key, "reason": reason, **details})
        return limit

    async def delete_limit(self, actor: Actor, key: str, reason: str) -> bool:
        """False when the key had no limit; the request is recorded either way."""
        violations = ViolationCollector()
        check_name(violations, "key", key, LIMIT_KEY_MAX_CHARS)
        check_reason(violations, reason, required=False)
        violations.raise_if_any()
        async with self._db.transaction() as conn:
            deleted = await admin_store.delete_limit(conn, key)
            await _record(conn, actor, "delete_limit", key, reason, {"deleted": deleted})
        log.info("limit deleted", extra={"actor": actor.name, "key": key, "reason": reason, "deleted": deleted})
        return deleted

    async def list_limits(self) -> list[Limit]:
        async with self._db.transaction() as conn:
            return await admin_store.list_limits(conn)

    async def set_tenant_weight(self, actor: Actor, tenant: TenantId, weight: int, reason: str) -> TenantWeight:
        violations = ViolationCollector()
        check_weight(violations, tenant, weight)
        check_reason(violations, reason, required=False)
        violations.raise_if_any()
        async with self._db.transaction() as conn:
            stored = await admin_store.set_tenant_weight(conn, tenant, weight, actor.name)
            await _record(conn, actor, "set_tenant_weight", tenant, reason, {"weight": weight})
        log.info("tenant weight set", extra={"actor": actor.name, "tenant": tenant, "weight": weight})
        return stored

    async def list_tenant_weights(self) -> list[TenantWeight]:
        async with self._db.transaction() as conn:
            return await admin_store.list_tenant_weights(conn)

    async def list_kinds(self, *, include_retired: bool = False) -> list[KindStatus]:
        async with self._db.transaction() as conn:
            return await admin_store.kind_statuses(conn, include_retired=include_retired, within_seconds=self._recent)

    async def pause_kind(self, actor: Actor, kind: str, reason: str) -> KindStatus:
        """A paused kind's waiting jobs are not claimed; pausing it again keeps the first pause."""
        _check_kind_request(kind, reason)
        async with self._db.transaction() as conn:
            await self._known_kind(conn, kind)
            await admin_store.pause_kind(conn, kind, actor.name, reason)
            await _record(conn, actor, "pause_kind", kind, reason, {})
            status = await self._known_kind(conn, kind)
        log.info("job kind paused", extra={"actor": actor.name, "kind": kind, "reason": reason})
        return status

    async def resume_kind(self, actor: Actor, kind: str, reason: str) -> KindStatus:
        """Resuming a kind that is not paused changes nothing and is still recorded."""
        _check_kind_request(kind, reason)
        async with self._db.transaction() as conn:
            await self._known_kind(conn, kind, include_retired=True)
            resumed = await admin_store.resume_kind(conn, kind)
            await _record(conn, actor, "resume_kind", kind, reason, {"was_paused": resumed})
            status = await self._known_kind(conn, kind, include_retired=True)
        log.info("job kind resumed", extra={"actor": actor.name, "kind": kind, "reason": reason})
        return status

    async def retire_kind(self, actor: Actor, kind: str, reason: str) -> None:
        """Later submissions of the kind are refused until a worker publishes it again."""
        _check_kind_request(kind, reason)
        async with self._db.transaction() as conn:
            await self._known_kind(conn, kind)
            await kind_store.retire(conn, kind, actor.name)
            await _record(conn, actor, "retire_kind", kind, reason, {})
        log.info("job kind retired", extra={"actor": actor.name, "kind": kind, "reason": reason})

    async def _known_kind(self, conn: Connection, kind: str, *, include_retired: bool = False) -> KindStatus:
        found = await admin_store.kind_statuses(
            conn, kind=kind, include_retired=include_retired, within_seconds=self._recent
        )
        if not found:
            known = await kind_store.list_known(conn)
            listed = ", ".join(sorted(known)[:50]) or "none"
            raise InvalidArgument(FieldViolation("kind", f"is not a published kind (known: {listed})"))
        return found[0]


def _check_kind_request(kind: str, reason: str) -> None:
    violations = ViolationCollector()
    check_name(violations, "kind", kind, SubmissionLimits().max_kind_chars)
    check_reason(violations, reason, required=False)
    violations.raise_if_any()


async def _record(
    conn: Connection, actor: Actor, action: str, target: str, reason: str, details: Mapping[str, object]
) -> None:
    await admin_store.record_action(
        conn, actor=actor.name, action=action, target=target, reason=reason, details=details
    )
