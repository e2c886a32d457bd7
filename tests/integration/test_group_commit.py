"""Group commit and batched inserts: fewer transactions and statements, the same per-caller answers."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest

from api_service.usecases.group_commit import GroupCommitter, each_alone
from api_service.usecases.submission import SubmissionService
from shared.domain.errors import AlreadyExists, DatabaseUnreachable, InvalidArgument, JobsError, Unavailable
from shared.domain.ids import TenantId
from shared.domain.submission_rules import SubmissionLimits
from shared.domain.trace_context import TraceContext
from shared.storage import job_store
from shared.storage.database import Connection, Database
from tests import factories
from tests.conditions import wait_until

pytestmark = pytest.mark.timeout(30)

TENANT = TenantId("tenant-a")
ACTOR = "tenant:tenant-a"
CONCURRENT_SUBMITS = 40


@pytest.fixture
async def service(db: Database) -> SubmissionService:
    return SubmissionService(db, await factories.published_kinds(db), SubmissionLimits())


def _transactions_that_inserted_jobs(sync_db) -> int:
    # Rows written by one transaction share its xmin.
    return sync_db.one("SELECT count(DISTINCT xmin::text) AS n FROM jobs")["n"]


async def test_concurrent_submissions_share_transactions(service, sync_db):
    outcomes = await asyncio.gather(
        *(service.submit(TENANT, ACTOR, factories.new_job(payload=b"%d" % i)) for i in range(CONCURRENT_SUBMITS))
    )

    assert all(o.created for o in outcomes)
    assert len({o.job.job_id for o in outcomes}) == CONCURRENT_SUBMITS
    assert sync_db.one("SELECT count(*) AS n FROM jobs")["n"] == CONCURRENT_SUBMITS
    assert _transactions_that_inserted_jobs(sync_db) < CONCURRENT_SUBMITS / 2


async def test_one_callers_refusal_does_not_touch_the_others_in_its_group(service, sync_db):
    await service.submit(TENANT, ACTOR, factories.new_job(idempotency_key="k", payload=b"first"))
    calls = [service.submit(TENANT, ACTOR, factories.new_job(payload=b"%d" % i)) for i in range(10)]
    calls.insert(5, service.submit(TENANT, ACTOR, factories.new_job(idempotency_key="k", payload=b"other")))

    answers = await asyncio.gather(*calls, return_exceptions=True)

    assert isinstance(answers[5], AlreadyExists)
    assert all(not isinstance(a, BaseException) and a.created for i, a in enumerate(answers) if i != 5)
    assert sync_db.one("SELECT count(*) AS n FROM jobs")["n"] == 11


def _insert_tag(tag: str, failing: dict[str, str]):
    """Work for `each_alone`: inserts `tag` into group_probe, then runs `failing[tag]`, if any."""

    async def work(conn):
        await conn.execute("CREATE TABLE IF NOT EXISTS group_probe (tag text)")
        await conn.execute("INSERT INTO group_probe VALUES (%s)", (tag,))
        if tag in failing:
            await conn.execute(failing[tag])
        return tag

    return work


async def test_a_failed_statement_rolls_back_the_group_and_each_item_runs_alone(db, sync_db):
    committer: GroupCommitter = GroupCommitter(db, each_alone, flushers=1)
    failing = {"bad": "SELECT 1 / 0"}

    answers = await asyncio.gather(
        *(committer.run(_insert_tag(tag, failing)) for tag in ("a", "b", "bad", "c")), return_exceptions=True
    )

    assert answers[:2] + answers[3:] == ["a", "b", "c"]
    assert isinstance(answers[2], InvalidArgument)
    tags = sorted(r["tag"] for r in sync_db.rows("SELECT tag FROM group_probe"))
    assert tags == ["a", "b", "c"]


async def test_a_batch_mixes_plain_and_keyed_submissions_in_request_order(service, sync_db):
    jobs = [factories.new_job(payload=b"%d" % i) for i in range(100)]
    jobs.insert(50, factories.new_job(payload=b"keyed", idempotency_key="key-1"))

    outcomes = await service.submit_many(TENANT, ACTOR, jobs)

    assert [o.job.job_id for o in outcomes] == [
        (await service.submit_many(TENANT, ACTOR, [jobs[50]]))[0].job.job_id if i == 50 else o.job.job_id
        for i, o in enumerate(outcomes)
    ]
    stored = {r["job_id"]: bytes(r["payload"]) for r in sync_db.rows("SELECT job_id::text, payload FROM jobs")}
    assert [stored[o.job.job_id] for o in outcomes] == [j.payload for j in jobs]
    assert outcomes[50].job.idempotency_key == "key-1"


async def test_the_answer_to_a_plain_submission_is_the_row_as_stored(service, db):
    # The plain inserts read back only what the database decides; the rest of the answer is built from
    # the submission, and must be what a later read of the row says.
    later = datetime.now(UTC) + timedelta(hours=1)
    varied = [
        factories.new_job(),
        factories.new_job(priority=7, max_attempts=2, labels={"doc": "d-1", "lang": "fr"}),
        factories.new_job(run_after=later, deadline=later + timedelta(days=1)),
        factories.new_job(trace_context=TraceContext("00-" + "a" * 32 + "-" + "b" * 16 + "-01", "k=v")),
    ]
    alone = await asyncio.gather(*(service.submit(TENANT, ACTOR, job) for job in varied))
    batch = await service.submit_many(TENANT, ACTOR, varied)

    async with db.transaction(TENANT) as conn:
        for outcome in [*alone, *batch]:
            assert outcome.created
            assert outcome.job == await job_store.get_job(conn, TENANT, outcome.job.job_id)
    assert [o.job.run_after for o in alone[2:3] + batch[2:3]] == [later, later]


class _DatabasePausingAfterCommit(Database):
    """The test's pool, whose transactions each stop at a gate after their COMMIT: the test decides
    when a flusher's last transaction ends, and who runs next in that loop turn."""

    def __init__(self, db: Database) -> None:  # the pool is the wrapped one's; nothing else is used
        self._db = db
        self.committed = asyncio.Event()
        self.gate = asyncio.Event()

    @contextlib.asynccontextmanager
    async def transaction(self, tenant: str | None = None) -> AsyncIterator[Connection]:
        async with self._db.transaction(tenant) as conn:
            yield conn
        self.committed.set()
        await self.gate.wait()


async def test_a_submission_queued_as_the_last_flusher_stops_is_still_committed(db):
    gated = _DatabasePausingAfterCommit(db)
    committer: GroupCommitter = GroupCommitter(gated, each_alone, flushers=1)

    def select(tag: str):
        async def work(conn):
            await conn.execute("SELECT 1")
            return tag

        return work

    first = asyncio.create_task(committer.run(select("first")))
    await gated.committed.wait()  # the only flusher committed the first submission and waits at the gate
    late_is_waiting = asyncio.Event()

    async def submit_late() -> str:
        late_is_waiting.set()
        # Woken right after the flusher, in the same loop turn: it queues once the flusher saw an empty
        # queue and returned, before the loop has run that task's done callbacks.
        await gated.gate.wait()
        return await committer.run(select("late"))

    late = asyncio.create_task(submit_late())
    await late_is_waiting.wait()
    gated.gate.set()

    async with asyncio.timeout(10):
        assert await first == "first"
        assert await asyncio.shield(late) == "late", "the late submission was left in the queue"


class _OpenTransactions:
    """Work that holds its transaction for a database round trip and records how many were open at once.
    With `hold_for_another`, a transaction stays open until another is open beside it (or 10 s pass)."""

    def __init__(self, *, hold_for_another: bool = False) -> None:
        self.open = 0
        self.most_open = 0
        self.transactions = 0
        self._hold_for_another = hold_for_another
        self._another_opened = asyncio.Event()

    async def __call__(self, conn: Connection, items: Sequence[int]) -> list[int | JobsError]:
        self.open += 1
        self.transactions += 1
        self.most_open = max(self.most_open, self.open)
        if self.open > 1:
            self._another_opened.set()
        try:
            await conn.execute("SELECT pg_sleep(0.005)")
            if self._hold_for_another:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._another_opened.wait(), 10)
            return list(items)
        finally:
            self.open -= 1


async def _callers_in_turn(committer: GroupCommitter, callers: int, rounds: int) -> None:
    async def caller(number: int) -> None:
        for turn in range(rounds):
            # Callers' requests arrive spread out, not all in one turn of the loop; how much does not
            # matter to what is asserted.
            await asyncio.sleep(0.0005 * (number % 8))
            assert await committer.run(number * rounds + turn) == number * rounds + turn

    await asyncio.gather(*(caller(n) for n in range(callers)))


async def test_callers_that_submit_again_as_soon_as_answered_share_one_transaction_at_a_time(db):
    # Each caller waits for its answer before its next submission, as an RPC client does: a flusher
    # started per arrival kept several one-item transactions going instead of one growing batch.
    work = _OpenTransactions()
    committer: GroupCommitter = GroupCommitter(db, work, batch_max=256, flushers=4)

    await _callers_in_turn(committer, callers=16, rounds=5)

    assert work.most_open == 1
    assert work.transactions <= 16 * 5 / 4


async def test_more_flushers_start_when_a_whole_batch_is_waiting(db):
    work = _OpenTransactions(hold_for_another=True)
    committer: GroupCommitter = GroupCommitter(db, work, batch_max=2, flushers=4)

    await _callers_in_turn(committer, callers=16, rounds=3)

    assert work.most_open > 1


class _Batches:
    """Work that records each batch it is given, and how many loop turns the ticker had counted."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.turn_at_start: list[int] = []
        self.turns = 0

    async def tick(self) -> None:
        while True:
            self.turns += 1
            await asyncio.sleep(0)

    async def __call__(self, conn: Connection, items: Sequence[int]) -> list[int | JobsError]:
        self.turn_at_start.append(self.turns)
        self.sizes.append(len(items))
        await conn.execute("SELECT 1")
        return list(items)


async def _arriving_every(committer: GroupCommitter, turns_apart: int, count: int) -> list[int]:
    async def arrive(number: int) -> int:
        for _ in range(number * turns_apart):
            await asyncio.sleep(0)
        return await committer.run(number)

    return await asyncio.gather(*(arrive(n) for n in range(count)))


async def test_under_load_the_calls_arriving_over_the_next_turns_share_one_transaction(db):
    work = _Batches()
    # A time bound no busy machine reaches: what is tested is the turns.
    committer: GroupCommitter = GroupCommitter(db, work, gather_turns=32, gather_seconds=60)
    assert list(await asyncio.gather(committer.run(-2), committer.run(-1))) == [-2, -1]  # two at once: under load

    assert await _arriving_every(committer, turns_apart=3, count=8) == list(range(8))

    assert work.sizes == [2, 8], "the calls arriving 3 turns apart each waited for a transaction of their own"


class _DatabaseNotingTurns(Database):
    """The test's pool, noting the ticker's count when each transaction is asked for: how long a flusher
    gathered, without the round trips that open the transaction."""

    def __init__(self, db: Database, batches: _Batches) -> None:  # the pool is the wrapped one's
        self._db = db
        self._batches = batches
        self.turn_at_begin: list[int] = []

    @contextlib.asynccontextmanager
    async def transaction(self, tenant: str | None = None) -> AsyncIterator[Connection]:
        self.turn_at_begin.append(self._batches.turns)
        async with self._db.transaction(tenant) as conn:
            yield conn


async def test_a_lone_submission_is_not_held_for_others(db):
    work = _Batches()
    noting = _DatabaseNotingTurns(db, work)
    committer: GroupCommitter = GroupCommitter(noting, work, gather_turns=1000, gather_seconds=60)
    ticker = asyncio.create_task(work.tick())
    try:
        for number in range(3):
            asked_at = work.turns
            assert await committer.run(number) == number
            assert noting.turn_at_begin[-1] - asked_at < 10, "a submission at idle waited for others"
    finally:
        ticker.cancel()
    assert work.sizes == [1, 1, 1]


async def test_the_wait_for_others_ends_by_its_time_bound(db):
    work = _Batches()
    # Turns enough to take minutes: only the time bound ends the wait.
    committer: GroupCommitter = GroupCommitter(db, work, gather_turns=10**9, gather_seconds=0.01)
    ticker = asyncio.create_task(work.tick())  # keeps the loop's turns short, as at idle
    try:
        async with asyncio.timeout(20):
            assert list(await asyncio.gather(committer.run(1), committer.run(2))) == [1, 2]
            assert await committer.run(3) == 3
    finally:
        ticker.cancel()
    assert work.sizes == [2, 1]


async def test_a_stuck_flush_does_not_hold_the_next_submission(db):
    """A flush that does not end (a lock held elsewhere, a database that stopped answering) leaves the
    submissions after it to another flusher on another connection."""
    release, stuck_started = asyncio.Event(), asyncio.Event()

    def work_for(tag: str):
        async def work(conn):
            await conn.execute("SELECT 1")
            if tag == "stuck":
                stuck_started.set()
                await release.wait()
            return tag

        return work

    committer: GroupCommitter = GroupCommitter(db, each_alone, stall_seconds=0.05)
    stuck = asyncio.create_task(committer.run(work_for("stuck")))
    await stuck_started.wait()
    try:
        async with asyncio.timeout(10):
            assert await committer.run(work_for("next")) == "next"
        assert not stuck.done()
    finally:
        release.set()
    assert await stuck == "stuck"


class _DatabaseUnreachable(Database):
    """Every transaction fails as it does while the database is down, once `answer` is set; counts the
    attempts. With `first`, the first attempt fails with that error instead."""

    def __init__(self, first: JobsError | None = None) -> None:  # no pool: nothing else is used
        self.attempts = 0
        self.answer = asyncio.Event()
        self.answer.set()
        self._first = first

    @contextlib.asynccontextmanager
    async def transaction(self, tenant: str | None = None) -> AsyncIterator[Connection]:
        self.attempts += 1
        await self.answer.wait()
        if self.attempts == 1 and self._first is not None:
            raise self._first
        if self.attempts:  # always; the yield below makes this the async generator asynccontextmanager wants
            raise DatabaseUnreachable("no database connection became available in time")
        yield Connection.__new__(Connection)


async def test_a_group_the_database_failed_is_answered_at_once_not_retried_item_by_item():
    """Alone, each item would only wait for the same database again, one after another, well past its
    caller's deadline."""
    unreachable = _DatabaseUnreachable()
    committer: GroupCommitter = GroupCommitter(unreachable, _Batches())

    answers = await asyncio.gather(*(committer.run(n) for n in range(5)), return_exceptions=True)

    assert all(isinstance(answer, Unavailable) for answer in answers)
    assert unreachable.attempts == 1


async def test_a_group_retried_item_by_item_stops_once_the_database_itself_fails():
    """A connection lost under the group's statement, then no connection at all: the first item's retry
    finds the database down, and the items behind it are answered at once, not each after another wait."""
    unreachable = _DatabaseUnreachable(first=Unavailable("the database is unavailable"))
    committer: GroupCommitter = GroupCommitter(unreachable, _Batches(), flushers=1)

    answers = await asyncio.gather(*(committer.run(n) for n in range(5)), return_exceptions=True)

    assert all(isinstance(answer, Unavailable) for answer in answers)
    assert unreachable.attempts <= 3, "a retry after the database failed waited for it again"


async def test_a_group_whose_connection_was_lost_under_one_item_commits_the_others(db, sync_db):
    """One item's statement loses the connection (its backend ends, as in a crash or a cut, or as a
    statement fault injected on purpose does): the group rolls back, and the other items, each on its
    own, commit; only the item that lost its connection again is answered UNAVAILABLE."""
    sync_db.execute("CREATE TABLE group_probe (tag text)")
    committer: GroupCommitter = GroupCommitter(db, each_alone, flushers=1)
    failing = {"cut": "SELECT pg_terminate_backend(pg_backend_pid())"}

    answers = await asyncio.gather(
        *(committer.run(_insert_tag(tag, failing)) for tag in ("a", "b", "cut", "c", "d")), return_exceptions=True
    )

    assert answers[:2] + answers[3:] == ["a", "b", "c", "d"]
    assert isinstance(answers[2], Unavailable) and not isinstance(answers[2], DatabaseUnreachable)
    assert sorted(r["tag"] for r in sync_db.rows("SELECT tag FROM group_probe")) == ["a", "b", "c", "d"]


async def test_a_job_committed_after_its_caller_left_is_still_logged_as_submitted(service, caplog):
    release = asyncio.Event()
    committer = service._group
    work = committer._work

    async def slow_work(conn, requests):
        await release.wait()
        return await work(conn, requests)

    committer._work = slow_work
    caplog.set_level(logging.INFO, logger="api_service.usecases.submission")
    caller = asyncio.create_task(service.submit(TENANT, ACTOR, factories.new_job(payload=b"left")))
    await wait_until(lambda: committer._draining == 1, what="the submission's flush to start")
    caller.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await caller
    release.set()
    await wait_until(lambda: committer._draining == 0, what="the flush to commit")

    assert [r.message for r in caplog.records if r.name == "api_service.usecases.submission"] == ["job submitted"]


async def test_an_answer_nobody_waits_for_is_not_reported_as_an_error():
    """A caller that went away leaves its outcome unread; asyncio must not log it as never retrieved."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(str(context.get("message"))))
    try:
        await _a_caller_leaves_before_its_group_fails()
        gc.collect()  # the unread outcome is reported when it is collected
    finally:
        loop.set_exception_handler(previous)
    assert not [message for message in reported if "never retrieved" in message]


async def _a_caller_leaves_before_its_group_fails() -> None:
    unreachable = _DatabaseUnreachable()
    unreachable.answer.clear()
    committer: GroupCommitter = GroupCommitter(unreachable, _Batches())
    caller = asyncio.create_task(committer.run(1))
    await wait_until(lambda: unreachable.attempts == 1, what="the flush to begin")
    caller.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await caller
    unreachable.answer.set()
    await wait_until(lambda: committer._draining == 0, what="the flush to fail")
