"""jobs.v1.JobService: decode, call a use-case with the caller's tenant, encode."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc

from api_service import convert
from api_service.request_context import current_principal
from api_service.usecases.admission import SubmissionAdmission
from api_service.usecases.job_queries import JobQueries
from api_service.usecases.job_watch import JobWatch
from api_service.usecases.lifecycle import JobLifecycle
from api_service.usecases.submission import SubmissionService
from jobs.v1 import jobs_pb2, jobs_pb2_grpc
from shared.domain.ids import JobId, TenantId

# The asyncio server's context; requests and responses are typed per method. (A string: the stubs'
# generic class is not subscriptable at run time.)
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


def _tenant() -> TenantId:
    tenant = current_principal().tenant
    assert tenant is not None  # the interceptor admits only tenant principals here
    return tenant


class JobServicer(jobs_pb2_grpc.JobServiceServicer):
    def __init__(
        self,
        submissions: SubmissionService,
        queries: JobQueries,
        lifecycle: JobLifecycle,
        watch: JobWatch,
        admission: SubmissionAdmission,
    ) -> None:
        self._admission = admission
        self._submissions = submissions
        self._queries = queries
        self._lifecycle = lifecycle
        self._watch = watch

    async def SubmitJob(self, request: jobs_pb2.SubmitJobRequest, context: Context) -> jobs_pb2.SubmitJobResponse:
        await self._admission.admit(_tenant(), 1)
        trace = convert.trace_context_from_metadata(context.invocation_metadata())
        outcome = await self._submissions.submit(
            _tenant(), current_principal().name, convert.new_job_from_proto(request, trace_context=trace)
        )
        return jobs_pb2.SubmitJobResponse(job=convert.job_to_proto(outcome.job), created=outcome.created)

    async def SubmitJobs(self, request: jobs_pb2.SubmitJobsRequest, context: Context) -> jobs_pb2.SubmitJobsResponse:
        trace = convert.trace_context_from_metadata(context.invocation_metadata())
        jobs = [convert.new_job_from_proto(item, f"jobs[{i}].", trace) for i, item in enumerate(request.jobs)]
        await self._admission.admit(_tenant(), len(jobs))
        outcomes = await self._submissions.submit_many(_tenant(), current_principal().name, jobs)
        return jobs_pb2.SubmitJobsResponse(
            results=[jobs_pb2.SubmitJobResponse(job=convert.job_to_proto(o.job), created=o.created) for o in outcomes]
        )

    async def GetJob(self, request: jobs_pb2.GetJobRequest, context: Context) -> jobs_pb2.Job:
        return convert.job_to_proto(await self._queries.get_job(_tenant(), JobId(request.job_id)))

    async def GetJobResult(self, request: jobs_pb2.GetJobResultRequest, context: Context) -> jobs_pb2.JobResult:
        return convert.result_to_proto(await self._queries.get_result(_tenant(), JobId(request.job_id)))

    async def ListJobs(self, request: jobs_pb2.ListJobsRequest, context: Context) -> jobs_pb2.ListJobsResponse:
        page = await self._queries.list_jobs(
            _tenant(),
            convert.list_filter_from_proto(request),
            convert.decode_page_token(request.page_token),
            request.page_size,
        )
        return jobs_pb2.ListJobsResponse(
            jobs=[convert.job_to_proto(job) for job in page.jobs],
            next_page_token=convert.encode_page_token(page.next_cursor),
        )

    async def WatchJob(self, request: jobs_pb2.WatchJobRequest, context: Context) -> AsyncIterator[jobs_pb2.Job]:
        async for job in self._watch.watch(
            _tenant(), JobId(request.job_id), request.after_sequence, include_progress=request.include_progress
        ):
            yield convert.job_to_proto(job)

    async def CancelJob(self, request: jobs_pb2.CancelJobRequest, context: Context) -> jobs_pb2.Job:
        job = await self._lifecycle.cancel(_tenant(), current_principal().name, JobId(request.job_id), request.reason)
        return convert.job_to_proto(job)

    async def RetryJob(self, request: jobs_pb2.RetryJobRequest, context: Context) -> jobs_pb2.Job:
        job = await self._lifecycle.retry(
            _tenant(),
            current_principal().name,
            JobId(request.job_id),
            request.reason,
            accept_duplicate_risk=request.accept_duplicate_risk,
            clear_checkpoints=request.clear_checkpoints,
        )
        return convert.job_to_proto(job)

    async def GetLatestResult(
        self, request: jobs_pb2.GetLatestResultRequest, context: Context
    ) -> jobs_pb2.GetLatestResultResponse:
        job, result = await self._queries.latest_result(_tenant(), request.resource_key)
        return jobs_pb2.GetLatestResultResponse(
            resource_key=request.resource_key,
            resource_version=job.resource_version or 0,
            result=convert.result_to_proto(result),
            job=convert.job_to_proto(job),
        )

    async def ListJobEvents(
        self, request: jobs_pb2.ListJobEventsRequest, context: Context
    ) -> jobs_pb2.ListJobEventsResponse:
        events, after = await self._queries.list_events(
            _tenant(), JobId(request.job_id), convert.decode_event_token(request.page_token), request.page_size
        )
        return jobs_pb2.ListJobEventsResponse(
            events=[convert.event_to_proto(e) for e in events], next_page_token=convert.encode_event_token(after)
        )
