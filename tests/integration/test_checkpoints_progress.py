"""Stage checkpoints and progress against the API and workers (in this process): a retry skips the
stages an earlier attempt finished, whatever the handler's shape; progress is coalesced on its way and
shows in GetJob, WatchJob and `jobsctl watch`. A stale lease's checkpoint, refused after its worker's
process is killed, is in tests/process/test_stale_checkpoint_e2e.py."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import grpc
import psycopg
import pytest

from jobs.v1 import jobs_pb2, worker_pb2
from tests.handlers_for_tests import STAGES
from tests.jobsctl_process import jobsctl, start_jobsctl
from tests.process_fixtures import ServiceStack, TenantClient, wait_until

pytestmark = pytest.mark.timeout(180)

S = jobs_pb2.JobState
TEST_HANDLERS = {"JOBS_HANDLER_MODULES": "tests.handlers_for_tests"}
SETTLED = {S.JOB_STATE_SUCCEEDED, S.JOB_STATE_FAILED, S.JOB_STATE_CANCELLED, S.JOB_STATE_OUTCOME_UNKNOWN}
ACCEPTED = worker_pb2.REPORT_OUTCOME_ACCEPTED
LEASE_LOST = worker_pb2.REPORT_OUTCOME_LEASE_LOST


def _settled(client: TenantClient, job_id: str, timeout: float = 60) -> jobs_pb2.Job:
    wait_until(lambda: client.get(job_id).state in SETTLED, timeout=timeout, what=f"job {job_id} to settle")
    return client.get(job_id)


def _executions(workdir: Path) -> list[str]:
    return (workdir / "executions").read_text().splitlines()


def _staged(client: TenantClient, kind: str, workdir: Path, **fields) -> str:
    workdir.mkdir()
    payload = json.dumps({"dir": str(workdir), "fail_after": 2}).encode()
    return client.submit(kind, payload, **fields).job.job_id


@pytest.mark.parametrize("executor", ["async", "thread", "process"])
def test_a_retry_skips_the_stages_an_earlier_attempt_checkpointed(
    service_stack: ServiceStack, tmp_path: Path, executor: str
):
    service_stack.start_api()
    service_stack.start_worker("w1", **TEST_HANDLERS)
    client = service_stack.tenant("acme")
    workdir = tmp_path / "document"
    job_id = _staged(client, f"staged.{executor}", workdir)

    job = _settled(client, job_id)
    assert job.state == S.JOB_STATE_SUCCEEDED and job.attempts == 2
    # Attempt 1 did two stages and failed; attempt 2 did only the two that were left.
    assert _executions(workdir) == ["1 upload_check", "1 extract_text", "2 embed", "2 publish_index"]
    outputs = json.loads(client.result(job_id).payload)
    assert outputs == {stage: str(workdir / f"{stage}.out") for stage in STAGES}
    assert [(c.stage, c.attempt) for c in job.checkpoints] == [
        ("upload_check", 1),
        ("extract_text", 1),
        ("embed", 2),
        ("publish_index", 2),
    ]
    assert json.loads(job.checkpoints[0].data) == {"output": str(workdir / "upload_check.out")}
    assert (job.progress.fraction, job.progress.message, job.progress.attempt) == (1.0, "publish_index", 2)
    shown = jobsctl(service_stack.api_target, "get", job_id)
    assert shown.code == 0, shown.stderr
    assert "progress 100% publish_index (attempt 2)" in shown.text
    assert "upload_check (attempt 1), extract_text (attempt 1), embed (attempt 2)" in shown.text


def test_a_manual_retry_keeps_checkpoints_unless_asked_to_clear_them(service_stack: ServiceStack, tmp_path: Path):
    service_stack.start_api()
    service_stack.start_worker("w1", **TEST_HANDLERS)
    client = service_stack.tenant("acme")
    kept, cleared = tmp_path / "kept", tmp_path / "cleared"
    jobs = {path: _staged(client, "staged.async", path, max_attempts=1) for path in (kept, cleared)}
    for path, job_id in jobs.items():
        assert _settled(client, job_id).state == S.JOB_STATE_FAILED
        assert len(client.get(job_id).checkpoints) == 2
        request = jobs_pb2.RetryJobRequest(job_id=job_id, reason="provider back", clear_checkpoints=path == cleared)
        client.stub.RetryJob(request, metadata=client.metadata, timeout=10)
        assert _settled(client, job_id).state == S.JOB_STATE_SUCCEEDED

    assert _executions(kept)[2:] == ["2 embed", "2 publish_index"]
    assert _executions(cleared)[2:] == [f"2 {stage}" for stage in STAGES]
    assert "(checkpoints cleared)" in _retry_reason(client, jobs[cleared])


def _retry_reason(client: TenantClient, job_id: str) -> str:
    events = client.stub.ListJobEvents(
        jobs_pb2.ListJobEventsRequest(job_id=job_id), metadata=client.metadata, timeout=10
    ).events
    return next(e.reason for e in events if e.reason.startswith("manual retry"))


def test_checkpoints_out_of_bounds_are_refused_with_clear_errors(service_stack: ServiceStack, tmp_path: Path):
    service_stack.start_api()
    service_stack.start_worker("w1", **TEST_HANDLERS)
    client = service_stack.tenant("acme")
    job_id = client.submit("progress.burst", str(tmp_path / "never").encode()).job.job_id
    wait_until(lambda: client.get(job_id).state == S.JOB_STATE_RUNNING, timeout=30, what="the job to run")
    token = client.get(job_id).fencing_token
    stub, metadata = service_stack.worker_stub()

    def record(stage: str, data: bytes = b"") -> worker_pb2.RecordCheckpointResponse:
        request = worker_pb2.RecordCheckpointRequest(job_id=job_id, fencing_token=token, stage=stage, data=data)
        return stub.RecordCheckpoint(request, metadata=metadata, timeout=10)

    with pytest.raises(grpc.RpcError) as too_big:
        record("embed", b"x" * (16 * 1024 + 1))
    assert too_big.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "data:" in (too_big.value.details() or "")
    for number in range(32):
        assert record(f"stage-{number}").outcome == ACCEPTED
    with pytest.raises(grpc.RpcError) as full:
        record("one-too-many")
    assert full.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "at most 32" in (full.value.details() or "")
    assert record("stage-0", b"again").outcome == ACCEPTED, "a stage recorded again takes no new room"


def _revision(database_url: str, job_id: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT revision FROM job_progress WHERE job_id = %s::uuid", (job_id,)).fetchone()
        return row[0] if row else 0


def test_progress_is_coalesced_and_shown_by_get_job_watch_job_and_jobsctl_watch(
    service_stack: ServiceStack, tmp_path: Path
):
    service_stack.start_api()
    # Publishes the kinds and goes: the job then waits for the next worker while both watches start.
    service_stack.start_worker("publisher", **TEST_HANDLERS).stop()
    client = service_stack.tenant("acme")
    release = tmp_path / "release"
    job_id = client.submit("progress.burst", str(release).encode()).job.job_id
    watch = start_jobsctl(service_stack.api_target, "watch", job_id)
    assert watch.stdout is not None
    # The watch is on before a worker can take the job: it must see RUNNING and the progress go by.
    first_line = watch.stdout.readline().decode()
    assert "PENDING" in first_line
    streamed: list[jobs_pb2.Job] = []
    stream = client.stub.WatchJob(
        jobs_pb2.WatchJobRequest(job_id=job_id, include_progress=True), metadata=client.metadata, timeout=120
    )
    reader = threading.Thread(target=lambda: streamed.extend(stream), daemon=True)
    reader.start()
    service_stack.start_worker("w1", **TEST_HANDLERS, JOBS_PROGRESS_INTERVAL_SECONDS="0.2")

    wait_until(
        lambda: client.get(job_id).progress.message == "waiting for the release file",
        timeout=60,
        what="the progress after the burst",
    )
    waiting = client.get(job_id)
    assert waiting.state == S.JOB_STATE_RUNNING and waiting.progress.fraction == 0.5
    # PROGRESS_BURST (1000) + 1 values reported without a pause: the first went at once, the rest as one.
    assert _revision(service_stack.database_url, job_id) <= 2
    release.touch()
    done = _settled(client, job_id)
    assert (done.state, done.progress.fraction, done.progress.message) == (S.JOB_STATE_SUCCEEDED, 1.0, "done")
    assert _revision(service_stack.database_url, job_id) <= 3, "the final value is one more write"

    reader.join(timeout=30)
    assert not reader.is_alive(), "WatchJob ends after the terminal state"
    sequences = [job.sequence for job in streamed]
    assert sequences == sorted(sequences), "the sequence never falls"
    progress_only = [
        later
        for earlier, later in zip(streamed, streamed[1:], strict=False)
        if later.sequence == earlier.sequence and later.state == earlier.state
    ]
    assert any(job.progress.message == "waiting for the release file" for job in progress_only)
    assert streamed[-1].state == S.JOB_STATE_SUCCEEDED and streamed[-1].progress.message == "done"
    plain = list(client.stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=client.metadata, timeout=30))
    plain_sequences = [job.sequence for job in plain]
    assert len(set(plain_sequences)) == len(plain_sequences), "without include_progress the sequence always rises"

    out, err = watch.communicate(timeout=60)
    transcript = first_line + out.decode()
    print(f"$ jobsctl watch {job_id}\n{transcript}")
    assert watch.returncode == 0, err
    assert "RUNNING" in transcript and "progress 50% waiting for the release file" in transcript
