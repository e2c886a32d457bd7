"""A checkpoint and progress reported under a stale lease are refused, after the lease's worker process
was killed and another replica claimed the job."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.v1 import worker_pb2
from tests.integration.test_checkpoints_progress import ACCEPTED, LEASE_LOST, TEST_HANDLERS, S
from tests.process_fixtures import ServiceStack, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def test_a_stale_leases_checkpoint_and_progress_are_refused(service_stack: ServiceStack, tmp_path: Path):
    service_stack.start_api()
    first = service_stack.start_worker("w1", **TEST_HANDLERS)
    client = service_stack.tenant("acme")
    job_id = client.submit("progress.burst", str(tmp_path / "never").encode(), max_attempts=2).job.job_id
    wait_until(lambda: client.get(job_id).state == S.JOB_STATE_RUNNING, timeout=30, what="attempt 1 to run")
    first.popen.kill()  # its lease (token 1) expires and another replica's claim gets token 2
    first.popen.wait()
    service_stack.start_worker("w2", **TEST_HANDLERS)
    wait_until(lambda: client.get(job_id).fencing_token == 2, timeout=30, what="attempt 2 to be claimed")

    stub, metadata = service_stack.worker_stub()
    stale = stub.RecordCheckpoint(
        worker_pb2.RecordCheckpointRequest(job_id=job_id, fencing_token=1, stage="extract_text", data=b"late"),
        metadata=metadata,
        timeout=10,
    )
    assert stale.outcome == LEASE_LOST and not stale.HasField("checkpoint")
    progress = stub.ReportProgress(
        worker_pb2.ReportProgressRequest(
            reports=[worker_pb2.ProgressReport(job_id=job_id, fencing_token=1, fraction=0.9, message="late")]
        ),
        metadata=metadata,
        timeout=10,
    )
    assert [o.outcome for o in progress.outcomes] == [LEASE_LOST]
    current = stub.RecordCheckpoint(
        worker_pb2.RecordCheckpointRequest(job_id=job_id, fencing_token=2, stage="extract_text", data=b"now"),
        metadata=metadata,
        timeout=10,
    )
    assert current.outcome == ACCEPTED and current.checkpoint.attempt == 2
    job = client.get(job_id)
    assert [(c.stage, c.data, c.fencing_token) for c in job.checkpoints] == [("extract_text", b"now", 2)]
    assert job.progress.message != "late"
