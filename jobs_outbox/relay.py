"""`python -m jobs_outbox.relay`: submits outbox rows through the SDK's client (durable_jobs.Client) and
marks them sent.

Each row goes out with an idempotency key derived from the row, so a relay killed after the API
accepted a row and before it marked it sent leaves the row for the next relay, whose submission gets
the same job back; an answer lost on the way is sent again with that key by the client itself, within
the call's deadline. Several relays may run: each claims rows with FOR UPDATE SKIP LOCKED.

Settings (flags override the environment): JOBS_OUTBOX_DATABASE_URL (the outbox's database),
JOBS_API_TARGET (default 127.0.0.1:50051), JOBS_OUTBOX_TOKEN (a tenant's bearer token), JOBS_TLS_CA
(a CA file: TLS to the API; plaintext without it).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from durable_jobs import Client, Job, Submission, Tls
from durable_jobs.errors import AlreadyExists, InvalidArgument, JobsError
from jobs_outbox import QUERIES

log = logging.getLogger("jobs_outbox.relay")
BATCH_SIZE_DEFAULT = 50
POLL_SECONDS_DEFAULT = 1.0
CALL_TIMEOUT_SECONDS = 10.0
BACKOFF_CAP_SECONDS = 60.0
RECONNECT_SECONDS = 1.0
# Refusals that the same request will always get: the row ends failed instead of being retried.
_PERMANENT = (InvalidArgument, AlreadyExists)
# For tests of a crash between the submission and its mark: after the API accepted a row, the relay
# writes the job id to this file and waits for ever (to be killed) instead of marking the row.
HOLD_AFTER_SUBMIT_ENV = "JOBS_OUTBOX_RELAY_HOLD_AFTER_SUBMIT"


@dataclass(frozen=True)
class RelaySettings:
    database_url: str
    target: str
    token: str
    tls_ca: str | None = None
    batch_size: int = BATCH_SIZE_DEFAULT
    poll_seconds: float = POLL_SECONDS_DEFAULT
    once: bool = False
    hold_after_submit: str | None = None


def submission(row: Mapping[str, Any]) -> Submission:
    """The row as a submission; its idempotency key is the caller's or derived from the row."""
    return Submission(
        kind=row["kind"],
        payload=bytes(row["payload"]),
        idempotency_key=row["idempotency_key"] or f"outbox:{row['submission_uid']}",
        priority=row["priority"],
        max_attempts=row["max_attempts"],
        resource_key=row["resource_key"] or "",
        resource_version=row["resource_version"],
        labels=row["labels"],
        run_after=row["run_after"],
        deadline=row["deadline"],
    )


class Relay:
    def __init__(self, settings: RelaySettings, client: Client) -> None:
        self._settings = settings
        self._client = client
        self.stopping = threading.Event()

    def run(self, conn: psycopg.Connection[Any]) -> None:
        """Until stopped (or, with `once`, until no row is due)."""
        while not self.stopping.is_set():
            sent = self.relay_batch(conn)
            if sent < self._settings.batch_size:
                if self._settings.once:
                    return
                self.stopping.wait(self._settings.poll_seconds)

    def relay_batch(self, conn: psycopg.Connection[Any]) -> int:
        """One transaction: claims due rows, submits each, records each outcome. How many were claimed."""
        with conn.transaction():
            rows = conn.execute(QUERIES["outbox_claim"], {"limit": self._settings.batch_size}).fetchall()
            for row in rows:
                self._relay_row(conn, row)
        return len(rows)

    def _relay_row(self, conn: psycopg.Connection[Any], row: Mapping[str, Any]) -> None:
        try:
            job = self._client.submit(timeout=CALL_TIMEOUT_SECONDS, **vars(submission(row)))
        except JobsError as exc:
            self._record_refusal(conn, row, exc)
            return
        self._hold_if_asked(job)
        conn.execute(QUERIES["outbox_mark_sent"], {"outbox_id": row["outbox_id"], "job_id": job.job_id})
        log.info("outbox row %s sent as job %s", row["outbox_id"], job.job_id)

    def _record_refusal(self, conn: psycopg.Connection[Any], row: Mapping[str, Any], exc: JobsError) -> None:
        error = f"{exc.code}: {exc.message}"
        if isinstance(exc, _PERMANENT):
            conn.execute(QUERIES["outbox_mark_failed"], {"outbox_id": row["outbox_id"], "error": error})
            log.error("outbox row %s refused for good: %s", row["outbox_id"], error)
            return
        # Indeterminate past the client's own retries, or transient: the same key later finds the job
        # if it was stored.
        conn.execute(
            QUERIES["outbox_retry_later"],
            {"outbox_id": row["outbox_id"], "error": error, "backoff_cap_seconds": BACKOFF_CAP_SECONDS},
        )
        log.warning("outbox row %s waits for another attempt: %s", row["outbox_id"], error)

    def _hold_if_asked(self, job: Job) -> None:
        path = self._settings.hold_after_submit
        if path:
            Path(path).write_text(job.job_id)
            while True:
                time.sleep(3600)


def settings_from(argv: Sequence[str] | None, env: Mapping[str, str]) -> RelaySettings:
    parser = argparse.ArgumentParser(prog="python -m jobs_outbox.relay", description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default=env.get("JOBS_OUTBOX_DATABASE_URL"))
    parser.add_argument("--target", default=env.get("JOBS_API_TARGET", "127.0.0.1:50051"))
    parser.add_argument("--token", default=env.get("JOBS_OUTBOX_TOKEN"))
    parser.add_argument("--tls-ca", default=env.get("JOBS_TLS_CA"))
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE_DEFAULT)
    parser.add_argument("--poll-seconds", type=float, default=POLL_SECONDS_DEFAULT)
    parser.add_argument("--once", action="store_true", help="relay what is due, then exit")
    args = parser.parse_args(argv)
    if not args.database_url or not args.token:
        parser.error("needs --database-url (JOBS_OUTBOX_DATABASE_URL) and --token (JOBS_OUTBOX_TOKEN)")
    return RelaySettings(
        database_url=args.database_url,
        target=args.target,
        token=args.token,
        tls_ca=args.tls_ca,
        batch_size=max(1, args.batch_size),
        poll_seconds=max(0.01, args.poll_seconds),
        once=args.once,
        hold_after_submit=env.get(HOLD_AFTER_SUBMIT_ENV),
    )


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = settings_from(argv, os.environ)
    tls = Tls(ca_file=settings.tls_ca) if settings.tls_ca else None
    with Client(settings.target, settings.token, tls=tls, timeout=CALL_TIMEOUT_SECONDS) as client:
        relay = Relay(settings, client)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: relay.stopping.set())
        log.info("relaying the outbox to %s", settings.target)
        while not relay.stopping.is_set():
            try:
                with psycopg.connect(settings.database_url, row_factory=dict_row) as conn:
                    relay.run(conn)
                return 0
            except psycopg.OperationalError as exc:
                # A claimed batch rolled back with the connection: its rows are due again, and a row
                # already submitted gets the same job on its next attempt.
                log.warning("outbox database unavailable, reconnecting: %s", exc)
                relay.stopping.wait(RECONNECT_SECONDS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
