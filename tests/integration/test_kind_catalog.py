"""The published kinds as the API sees them, over a real database: what stays known, what is retired,
which policy is in force when replicas disagree, and how stale the API's copy may be."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from api_service.usecases.kind_catalog import KindCatalog
from api_service.usecases.submission import SubmissionService
from shared.domain.errors import InvalidArgument
from shared.domain.kinds import KindPolicy
from shared.domain.submission_rules import SubmissionLimits
from shared.handlers.builtin import builtin_policies
from shared.storage import kind_store
from shared.storage.database import Database
from tests import factories
from tests.process_fixtures import REPO_ROOT

STARTED = datetime(2026, 1, 1, tzinfo=UTC)


async def _publish(db: Database, publisher: str, started_at: datetime, *policies: KindPolicy) -> None:
    async with db.transaction() as conn:
        await kind_store.publish(conn, publisher, started_at, list(policies))


async def _known(db: Database) -> dict[str, KindPolicy]:
    async with db.transaction() as conn:
        return await kind_store.list_known(conn)


async def test_the_replica_started_last_sets_the_policy_and_the_disagreement_shows(db: Database):
    await _publish(db, "old", STARTED, KindPolicy("resize", max_attempts=3))
    await _publish(db, "new", STARTED + timedelta(seconds=5), KindPolicy("resize", max_attempts=7))
    await _publish(db, "old", STARTED, KindPolicy("resize", max_attempts=3))  # the old one refreshes
    assert (await _known(db))["resize"].max_attempts == 7
    async with db.transaction() as conn:
        (conflict,) = await kind_store.policy_conflicts(conn, within_seconds=60)
    assert (conflict.kind, conflict.policies, conflict.publishers) == ("resize", 2, ("new", "old"))


async def test_replicas_that_agree_are_no_conflict_and_gone_replicas_are_forgotten(db: Database):
    await _publish(db, "a", STARTED, KindPolicy("resize"))
    await _publish(db, "b", STARTED, KindPolicy("resize"))
    async with db.transaction() as conn:
        assert await kind_store.policy_conflicts(conn, within_seconds=60) == []
        await kind_store.forget_publishers(conn, older_than_seconds=0)
        assert await kind_store.policy_conflicts(conn, within_seconds=60) == []
    assert "resize" in await _known(db), "a kind outlives its publishers"


async def test_a_retired_kind_is_refused_until_a_worker_publishes_it_again(db: Database):
    await _publish(db, "w", STARTED, KindPolicy("resize"))
    catalog = KindCatalog(db, max_staleness_seconds=0)
    service = SubmissionService(db, catalog, SubmissionLimits())
    async with db.transaction() as conn:
        assert await kind_store.retire(conn, "resize", actor="operator:test")
        assert not await kind_store.retire(conn, "resize", actor="operator:test")
    with pytest.raises(InvalidArgument) as refused:
        await service.submit(factories.TENANT_DEFAULT, factories.ACTOR_DEFAULT, factories.new_job(kind="resize"))
    assert refused.value.violations[0].field == "kind"
    await _publish(db, "w", STARTED, KindPolicy("resize", max_attempts=4))
    outcome = await service.submit(factories.TENANT_DEFAULT, factories.ACTOR_DEFAULT, factories.new_job(kind="resize"))
    assert outcome.job.max_attempts == 4


async def test_the_builtin_kinds_are_known_before_any_worker_and_never_override_one(db: Database):
    async with db.transaction() as conn:
        await kind_store.publish_builtin(conn, builtin_policies())
    assert {"echo", "sleep", "flaky", "summarize"} <= set(await _known(db))
    await _publish(db, "w", STARTED, KindPolicy("flaky", max_attempts=9))
    async with db.transaction() as conn:
        await kind_store.publish_builtin(conn, builtin_policies())
    assert (await _known(db))["flaky"].max_attempts == 9


async def test_a_newly_published_kind_is_accepted_at_once_and_known_kinds_stay_cached(db: Database):
    catalog = KindCatalog(db, max_staleness_seconds=3600, miss_refresh_seconds=0)
    assert "resize" not in await catalog.known("resize")
    await _publish(db, "w", STARTED, KindPolicy("resize", max_attempts=2))
    assert (await catalog.known("resize"))["resize"].max_attempts == 2
    await _publish(db, "w2", STARTED + timedelta(seconds=1), KindPolicy("resize", max_attempts=5))
    assert (await catalog.known("resize"))["resize"].max_attempts == 2, "within the staleness bound"


def test_retire_kind_from_the_command_line(database_url: str):
    def retire() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "api_service", "retire-kind", "resize"],
            env={"DATABASE_URL": database_url, "PATH": "/usr/bin:/bin"},
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )

    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO job_kinds (kind, max_attempts, backoff_base_seconds, backoff_cap_seconds,"
            " external_side_effects, executor, policy_digest, published_by, publisher_started_at)"
            " VALUES ('resize', 3, 1, 300, false, 'async', '\\x00', 'w', now())"
        )
        first, again = retire(), retire()
        assert first.returncode == 0, first.stderr
        assert again.returncode == 1 and "retired already" in again.stderr
        row = conn.execute("SELECT retired_by FROM job_kinds WHERE kind = 'resize'").fetchone()
        assert row is not None
        (retired_by,) = row
        recorded = conn.execute("SELECT actor, action, target FROM admin_actions").fetchall()
    assert retired_by.startswith("operator:")
    assert [(action, target) for _, action, target in recorded] == [("retire_kind", "resize")]
    assert recorded[0][0] == retired_by, "recorded with who, like an AdminService retirement"
