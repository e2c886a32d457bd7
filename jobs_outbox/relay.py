"""`python -m jobs_outbox.relay`: submits outbox rows through jobs.v1.JobService and marks them sent.

Each row goes out with an idempotency key derived from the row, so a relay killed after the API
accepted a row and before it marked it sent leaves the row for the next relay, whose submission gets
the same job back. Several relays may run: each claims rows with FOR UPDATE SKIP LOCKED, and the rows of
one resource key go out one at a time in the order they were written (a deletion after its versions).
A refusal is classified by jobs_outbox.refusals: a permanent one, or a row that cannot be sent at all,
ends the row failed with the reason, and the relay goes on with the next.

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

import grpc
import psycopg
from psycopg.rows import dict_row

from jobs.v1 import jobs_pb2, jobs_pb2_grpc
from jobs_outbox import DELETE_RESOURCE, QUERIES, InvalidSubmission, Submission
from jobs_outbox.refusals import Refusal, refusal_of

log = logging.getLogger("jobs_outbox.relay")
BATCH_SIZE_DEFAULT = 50
POLL_SECONDS_DEFAULT = 1.0
CALL_TIMEOUT_SECONDS = 10.0
BACKOFF_CAP_SECONDS = 60.0
RECONNECT_SECONDS = 1.0
# A refusal's message kept on the row: enough to act on, never the whole of a large one.
ERROR_MAX_CHARS = 2000
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


def submit_request(row: Mapping[str, Any]) -> jobs_pb2.SubmitJobRequest:
    """The row as a submission; raises InvalidSubmission for a row the API would refuse for good (one
    written by other means than enqueue, or before enqueue checked)."""
    submission = Submission(
        kind=row["kind"],
        payload=bytes(row["payload"] or b""),
        idempotency_key=row["idempotency_key"],
        priority=row["priority"],
        run_after=row["run_after"],
        max_attempts=row["max_attempts"],
        deadline=row["deadline"],
        resource_key=row["resource_key"],
        resource_version=row["resource_version"],
        labels=row["labels"],
    )
    return submission.request(row["submission_uid"])


class Relay:
    def __init__(self, settings: RelaySettings, stub: jobs_pb2_grpc.JobServiceStub) -> None:
        self._settings = settings
        self._stub = stub
        self._metadata = (("authorization", f"Bearer {settings.token}"),)
        self.stopping = threading.Event()

    def run(self, conn: psycopg.Connection[Any]) -> None:
        """Until stopped (or, with `once`, until no row is due). A batch that claimed rows is followed
        at once by the next: the rows it held back behind an earlier row of their key may be due now."""
        while not self.stopping.is_set():
            if self.relay_batch(conn):
                continue
            if self._settings.once:
                return
            self.stopping.wait(self._settings.poll_seconds)

    def relay_batch(self, conn: psycopg.Connection[Any]) -> int:
        """One transaction: claims due rows, sends each, records each outcome. How many were claimed."""
        with conn.transaction():
            rows = conn.execute(QUERIES["outbox_claim"], {"limit": self._settings.batch_size}).fetchall()
            for row in rows:
                self._relay_row(conn, row)
        return len(rows)

    def _relay_row(self, conn: psycopg.Connection[Any], row: Mapping[str, Any]) -> None:
        if row["action"] == DELETE_RESOURCE:
            self._relay_deletion(conn, row)
            return
        try:
            request = submit_request(row)
        except InvalidSubmission as exc:
            self._mark_failed(conn, row, f"cannot be sent: {exc}")
            return
        try:
            response = self._stub.SubmitJob(request, metadata=self._metadata, timeout=CALL_TIMEOUT_SECONDS)
        except grpc.RpcError as exc:
            self._record_refusal(conn, row, refusal_of(exc))
            return
        self._hold_if_asked(response.job.job_id)
        self._mark_sent(conn, row, response.job.job_id)
        log.info("outbox row %s sent as job %s", row["outbox_id"], response.job.job_id)

    def _relay_deletion(self, conn: psycopg.Connection[Any], row: Mapping[str, Any]) -> None:
        request = jobs_pb2.DeleteResourceRequest(resource_key=row["resource_key"], reason=row["reason"])
        try:
            response = self._stub.DeleteResource(request, metadata=self._metadata, timeout=CALL_TIMEOUT_SECONDS)
        except grpc.RpcError as exc:
            refusal = refusal_of(exc)
            if refusal.code is grpc.StatusCode.NOT_FOUND:
                # No job of the key reached the service: there is nothing of it to delete.
                self._mark_sent(conn, row, None, note=f"nothing to delete: {refusal}")
                return
            self._record_refusal(conn, row, refusal)
            return
        self._mark_sent(conn, row, None, note=f"deleted up to version {response.deleted_version}")
        log.info(
            "outbox row %s deleted %s up to version %s", row["outbox_id"], row["resource_key"], response.deleted_version
        )

    def _mark_sent(
        self, conn: psycopg.Connection[Any], row: Mapping[str, Any], job_id: str | None, note: str = ""
    ) -> None:
        conn.execute(
            QUERIES["outbox_mark_sent"], {"outbox_id": row["outbox_id"], "job_id": job_id, "note": _clean(note)}
        )

    def _mark_failed(self, conn: psycopg.Connection[Any], row: Mapping[str, Any], error: str) -> None:
        conn.execute(QUERIES["outbox_mark_failed"], {"outbox_id": row["outbox_id"], "error": _clean(error)})
        log.error("outbox row %s failed for good: %s", row["outbox_id"], error)

    def _record_refusal(self, conn: psycopg.Connection[Any], row: Mapping[str, Any], refusal: Refusal) -> None:
        if refusal.permanent:
            self._mark_failed(conn, row, str(refusal))
            return
        # Indeterminate or transient (UNAVAILABLE may come after the commit): the same key later finds
        # the job if it was stored.
        conn.execute(
            QUERIES["outbox_retry_later"],
            {
                "outbox_id": row["outbox_id"],
                "error": _clean(str(refusal)),
                "retry_after_seconds": refusal.retry_after_seconds or 0.0,
                "backoff_cap_seconds": BACKOFF_CAP_SECONDS,
            },
        )
        log.warning("outbox row %s waits for another attempt: %s", row["outbox_id"], refusal)

    def _hold_if_asked(self, job_id: str) -> None:
        path = self._settings.hold_after_submit
        if path:
            Path(path).write_text(job_id)
            while True:
                time.sleep(3600)


def _clean(text: str) -> str:
    """Fit for a text column: no NUL, and bounded."""
    return text.replace("\x00", "")[:ERROR_MAX_CHARS]


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


def _channel(settings: RelaySettings) -> grpc.Channel:
    if not settings.tls_ca:
        return grpc.insecure_channel(settings.target)
    credentials = grpc.ssl_channel_credentials(root_certificates=Path(settings.tls_ca).read_bytes())
    return grpc.secure_channel(settings.target, credentials)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = settings_from(argv, os.environ)
    with _channel(settings) as channel:
        relay = Relay(settings, jobs_pb2_grpc.JobServiceStub(channel))
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
