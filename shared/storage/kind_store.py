"""The job kinds workers publish, and the policy in force for each."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from shared.domain.kinds import Executor, KindPolicy
from shared.storage import queries
from shared.storage.database import Connection

BUILTIN_PUBLISHER = "built-in"


@dataclass(frozen=True)
class PolicyConflict:
    kind: str
    policies: int
    publishers: tuple[str, ...]


def _policies_json(policies: Sequence[KindPolicy]) -> str:
    return json.dumps(
        [
            {
                "kind": p.kind,
                "max_attempts": p.max_attempts,
                "backoff_base_seconds": p.backoff_base_seconds,
                "backoff_cap_seconds": p.backoff_cap_seconds,
                "timeout_seconds": p.timeout_seconds,
                "external_side_effects": p.external_side_effects,
                "limit_keys": list(p.limit_keys),
                "executor": p.executor.value,
                "policy_digest": p.digest().hex(),
            }
            for p in sorted(policies, key=lambda p: p.kind)
        ]
    )


async def publish(conn: Connection, publisher: str, started_at: datetime, policies: Sequence[KindPolicy]) -> None:
    """Records this replica's kinds; its policy is in force unless a replica started later disagrees."""
    if policies:
        await conn.execute(
            queries.KIND_PUBLISH,
            {"policies": _policies_json(policies), "publisher": publisher, "started_at": started_at},
        )


async def publish_builtin(conn: Connection, policies: Sequence[KindPolicy]) -> None:
    """Makes the built-in kinds known before a worker publishes them; never overrides a publication."""
    await conn.execute(
        queries.KIND_PUBLISH_BUILTIN, {"policies": _policies_json(policies), "publisher": BUILTIN_PUBLISHER}
    )


async def list_known(conn: Connection) -> dict[str, KindPolicy]:
    cur = await conn.execute(queries.KIND_LIST_KNOWN)
    return {
        row["kind"]: KindPolicy(
            row["kind"],
            max_attempts=row["max_attempts"],
            backoff_base_seconds=row["backoff_base_seconds"],
            backoff_cap_seconds=row["backoff_cap_seconds"],
            timeout_seconds=row["timeout_seconds"],
            external_side_effects=row["external_side_effects"],
            limit_keys=tuple(row["limit_keys"]),
            executor=Executor(row["executor"]),
        )
        for row in await cur.fetchall()
    }


async def policy_conflicts(conn: Connection, within_seconds: float) -> list[PolicyConflict]:
    cur = await conn.execute(queries.KIND_POLICY_CONFLICTS, {"within_seconds": within_seconds})
    return [PolicyConflict(r["kind"], r["policies"], tuple(r["publishers"])) for r in await cur.fetchall()]


async def forget_publishers(conn: Connection, older_than_seconds: float) -> None:
    await conn.execute(queries.KIND_PUBLISHERS_FORGET, {"older_than_seconds": older_than_seconds})


async def retire(conn: Connection, kind: str, actor: str) -> bool:
    """False when the kind is unknown or already retired."""
    cur = await conn.execute(queries.KIND_RETIRE, {"kind": kind, "actor": actor})
    return await cur.fetchone() is not None
