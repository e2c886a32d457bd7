"""Leases and fencing: no attempt writes once a newer one was claimed, no external call whose outcome is
unknown is run again without a person's consent, and a cancelled handler stops."""

from __future__ import annotations

from collections.abc import Iterator

from chaos.model import Run, Violation, violation

# The reason RetryJob records when a person accepted the duplicate risk (shared/storage, job_retry).
RISK_ACCEPTED = "duplicate risk accepted"


def check_no_stale_writes(run: Run) -> Iterator[Violation]:
    """As far as the database recorded, no job had two attempts live at once: every row an attempt wrote
    under its token (receipts, checkpoints, failures) was written before the next attempt was claimed."""
    for job_id, writes in run.writes.items():
        claims = run.claims(job_id)
        for row, what, at in writes:
            token = int(row["fencing_token"])
            later = [c for c in claims if int(c["fencing_token"]) > token]
            if later and at > float(later[0]["at"]):
                yield violation(
                    "stale_write",
                    job_id,
                    f"{what} under token {token} after token {later[0]['fencing_token']} was claimed",
                    row,
                    later[0],
                )
    for (job_id, token), attempt in run.attempts.items():
        if len(attempt.starts) > 1:
            yield violation(
                "token_reused", job_id, f"{len(attempt.starts)} handlers ran under token {token}", *attempt.starts
            )


def check_no_blind_retry(run: Run) -> Iterator[Violation]:
    """An attempt that may have made its external call, never confirmed, leaves an unknown outcome: the job
    runs again only after a RetryJob that accepted the duplicate risk."""
    for (job_id, token), attempt in run.attempts.items():
        intent = attempt.called_out()
        # The database decides from its receipt: a confirmation that committed although the handler never
        # heard so (killed, or the reply lost) makes the retry an informed one.
        confirmed = any(
            int(r["fencing_token"]) == token and r["confirmed_at"] is not None for r in run.receipts.get(job_id, [])
        )
        if intent is None or confirmed:
            continue
        events = run.events.get(job_id, [])
        own = next((e for e in events if int(e["fencing_token"]) == token and e["to_state"] == "running"), None)
        after = [e for e in events if own is None or int(e["sequence"]) > int(own["sequence"])]
        for event in after:
            if RISK_ACCEPTED in str(event["reason"]):
                break
            if event["to_state"] == "running" and event["from_state"] != "running":
                yield violation(
                    "blind_retry",
                    job_id,
                    f"attempt under token {event['fencing_token']} started after the unconfirmed external call of "
                    f"token {token}, with no retry that accepted the duplicate risk",
                    intent,
                    own,
                    event,
                )
                break


def check_cancels_stop_handlers(run: Run) -> Iterator[Violation]:
    """A handler running when its job's cancel was acknowledged stops within a heartbeat and a lease (the
    worker hears at its next heartbeat, or stops the handler when its lease runs out unrenewed), not
    counting the time its worker was stopped by a fault."""
    config = run.config
    bound = (
        float(config.get("lease_seconds", 30))
        + float(config.get("heartbeat_seconds", 10))
        + float(config.get("cancel_slack_seconds", 10))
    )
    for exchange in run.exchanges:
        if exchange.op != "cancel" or not exchange.ok or exchange.foreign or exchange.answer is None:
            continue
        cancelled_at = exchange.answer.t
        job_id = str(exchange.call["job_id"])
        for attempt in run.attempts_of(job_id):
            start, end = attempt.start, attempt.end
            if start is None or end is None or start.t >= cancelled_at or end.t <= cancelled_at:
                continue
            ran_on = end.t - cancelled_at - run.paused_seconds(attempt.worker, cancelled_at, end.t)
            if ran_on > bound:
                yield violation(
                    "cancel_ignored",
                    job_id,
                    f"the handler under token {attempt.token} ran {ran_on:.1f}s past the acknowledged cancel "
                    f"(bound {bound:.1f}s) and ended {end['outcome']}",
                    exchange.call,
                    exchange.answer,
                    start,
                    end,
                )
