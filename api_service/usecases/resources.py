"""Deleting a resource key: a tombstone that ends its work and hides its results, recorded with who and why."""

from __future__ import annotations

import logging

from shared.domain.errors import NotFound, ViolationCollector
from shared.domain.ids import TenantId
from shared.domain.submission_rules import SubmissionLimits, check_text
from shared.storage import resource_store
from shared.storage.database import Database
from shared.storage.resource_store import Deletion

log = logging.getLogger(__name__)
REASON_MAX_CHARS = 500


class ResourceDeletions:
    def __init__(self, db: Database) -> None:
        self._db = db

    async def delete(self, tenant: TenantId, actor: str, resource_key: str, reason: str) -> Deletion:
        """Every version submitted so far is deleted for good; a higher version may be submitted later."""
        violations = ViolationCollector()
        if not resource_key:
            violations.add("resource_key", "is required")
        check_text(violations, "resource_key", resource_key, SubmissionLimits().max_resource_key_chars)
        if not reason.strip():
            violations.add("reason", "is required: a deletion is recorded with who and why")
        check_text(violations, "reason", reason, REASON_MAX_CHARS)
        violations.raise_if_any()
        async with self._db.transaction(tenant) as conn:
            deletion = await resource_store.delete_resource(
                conn, tenant=tenant, resource_key=resource_key, actor=actor, reason=reason
            )
        if deletion is None:
            raise NotFound("no job was submitted for this resource key")
        log.info(
            "resource deleted",
            extra={
                "tenant": tenant,
                "actor": actor,
                "reason": reason,
                "resource_key": resource_key,
                "resource_version": deletion.deleted_version,
            },
        )
        return deletion
