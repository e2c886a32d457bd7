"""jobs.v1.WorkerService: fenced reports from worker replicas."""

from __future__ import annotations

from typing import Any, TypeAlias

import grpc

from api_service import convert
from api_service.request_context import current_principal
from api_service.usecases.worker_reports import WorkerReports
from jobs.v1 import worker_pb2, worker_pb2_grpc
from shared.domain.ids import FencingToken, JobId
from shared.domain.jobs import LeaseRef, ReportOutcome

WORKER_ID_METADATA = "jobs-worker-id"
WORKER_ID_MAX_CHARS = 128

# The asyncio server's context; requests and responses are typed per method. (A string: the stubs'
# generic class is not subscriptable at run time.)
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


def _worker_id(context: Context) -> str:
    """The replica's own id when it sent one (for the job history), else the credential's name."""
    for key, value in context.invocation_metadata() or ():
        if key == WORKER_ID_METADATA and isinstance(value, str):
            cleaned = "".join(ch for ch in value if ch.isprintable())[:WORKER_ID_MAX_CHARS]
            if cleaned:
                return cleaned
    return current_principal().name.removeprefix("worker:")


class WorkerServicer(worker_pb2_grpc.WorkerServiceServicer):
    def __init__(self, reports: WorkerReports) -> None:
        self._reports = reports

    async def Heartbeat(self, request: worker_pb2.HeartbeatRequest, context: Context) -> worker_pb2.HeartbeatResponse:
        extend_by = convert.duration_seconds(request.extend_by) if request.HasField("extend_by") else 0.0
        statuses = await self._reports.heartbeat(convert.leases_from_proto(request.leases), extend_by)
        return worker_pb2.HeartbeatResponse(leases=[convert.lease_status_to_proto(s) for s in statuses])

    async def CompleteJob(
        self, request: worker_pb2.CompleteJobRequest, context: Context
    ) -> worker_pb2.CompleteJobResponse:
        state = await self._reports.complete(_worker_id(context), convert.completion_from_proto(request))
        return worker_pb2.CompleteJobResponse(state=convert.state_to_proto(state))

    async def CompleteJobs(
        self, request: worker_pb2.CompleteJobsRequest, context: Context
    ) -> worker_pb2.CompleteJobsResponse:
        batch = convert.completion_batch_from_proto(request.completions)
        if batch is not None:
            outcomes = await self._reports.complete_plain(_worker_id(context), batch)
            # Each outcome as a dict, which the repeated field takes in place: a CompletionOutcome made first
            # is copied into it again (about 0.6 us an outcome, half of the answer's cost).
            return worker_pb2.CompleteJobsResponse(
                outcomes=[
                    {"job_id": job_id, "outcome": outcome}
                    for job_id, outcome in zip(batch.job_ids, convert.outcomes_to_proto(outcomes), strict=True)
                ]
            )
        completions = [
            convert.completion_from_proto(item, f"completions[{i}].") for i, item in enumerate(request.completions)
        ]
        outcomes = await self._reports.complete_many(_worker_id(context), completions)
        return worker_pb2.CompleteJobsResponse(
            outcomes=[
                worker_pb2.CompletionOutcome(job_id=c.job_id, outcome=convert.outcome_to_proto(o))
                for c, o in zip(completions, outcomes, strict=True)
            ]
        )

    async def FailJob(self, request: worker_pb2.FailJobRequest, context: Context) -> worker_pb2.FailJobResponse:
        report = convert.failure_from_proto(request)
        outcome = await self._reports.fail(_worker_id(context), report.lease, report.error, report.hint)
        return convert.fail_response_to_proto(outcome)

    async def FailJobs(self, request: worker_pb2.FailJobsRequest, context: Context) -> worker_pb2.FailJobsResponse:
        reports = [convert.failure_from_proto(item) for item in request.failures]
        outcomes = await self._reports.fail_many(_worker_id(context), reports)
        return worker_pb2.FailJobsResponse(
            outcomes=[
                convert.failure_outcome_to_proto(r.lease.job_id, o) for r, o in zip(reports, outcomes, strict=True)
            ]
        )

    async def ReleaseJob(
        self, request: worker_pb2.ReleaseJobRequest, context: Context
    ) -> worker_pb2.ReleaseJobResponse:
        report = convert.release_from_proto(request)
        state = await self._reports.release(
            _worker_id(context), report.lease, started=report.started, reason=report.reason
        )
        return worker_pb2.ReleaseJobResponse(state=convert.state_to_proto(state))

    async def ReleaseJobs(
        self, request: worker_pb2.ReleaseJobsRequest, context: Context
    ) -> worker_pb2.ReleaseJobsResponse:
        reports = [convert.release_from_proto(item) for item in request.releases]
        outcomes = await self._reports.release_many(_worker_id(context), reports)
        return worker_pb2.ReleaseJobsResponse(
            outcomes=[
                convert.release_outcome_to_proto(r.lease.job_id, o) for r, o in zip(reports, outcomes, strict=True)
            ]
        )

    async def RecordCheckpoint(
        self, request: worker_pb2.RecordCheckpointRequest, context: Context
    ) -> worker_pb2.RecordCheckpointResponse:
        stored = await self._reports.record_checkpoint(
            _worker_id(context),
            LeaseRef(JobId(request.job_id), FencingToken(request.fencing_token)),
            request.stage,
            request.data,
        )
        if isinstance(stored, ReportOutcome):
            return worker_pb2.RecordCheckpointResponse(outcome=convert.outcome_to_proto(stored))
        return worker_pb2.RecordCheckpointResponse(
            outcome=convert.outcome_to_proto(ReportOutcome.ACCEPTED), checkpoint=convert.checkpoint_to_proto(stored)
        )

    async def ReportProgress(
        self, request: worker_pb2.ReportProgressRequest, context: Context
    ) -> worker_pb2.ReportProgressResponse:
        reports = [convert.progress_report_from_proto(item) for item in request.reports]
        outcomes = await self._reports.report_progress(reports)
        return worker_pb2.ReportProgressResponse(
            outcomes=[
                worker_pb2.ProgressOutcome(job_id=r.job_id, outcome=convert.outcome_to_proto(o))
                for r, o in zip(reports, outcomes, strict=True)
            ]
        )

    async def AppendJobLogs(
        self, request: worker_pb2.AppendJobLogsRequest, context: Context
    ) -> worker_pb2.AppendJobLogsResponse:
        logs = [convert.attempt_log_from_proto(item) for item in request.logs]
        outcomes = await self._reports.append_logs(logs)
        return worker_pb2.AppendJobLogsResponse(
            outcomes=[
                worker_pb2.AppendJobLogsOutcome(job_id=log.job_id, outcome=convert.outcome_to_proto(o))
                for log, o in zip(logs, outcomes, strict=True)
            ]
        )

    async def GetDependencyResults(
        self, request: worker_pb2.GetDependencyResultsRequest, context: Context
    ) -> worker_pb2.GetDependencyResultsResponse:
        page = await self._reports.dependency_results(
            LeaseRef(JobId(request.job_id), FencingToken(request.fencing_token)),
            JobId(request.after_job_id) if request.after_job_id else None,
        )
        if isinstance(page, ReportOutcome):
            return worker_pb2.GetDependencyResultsResponse(outcome=convert.outcome_to_proto(page))
        return worker_pb2.GetDependencyResultsResponse(
            results=[worker_pb2.DependencyResult(job_id=job_id, payload=payload) for job_id, payload in page.results],
            next_after_job_id=page.next_after or "",
            outcome=convert.outcome_to_proto(ReportOutcome.ACCEPTED),
        )
