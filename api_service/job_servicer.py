"""jobs.v1.JobService: decode, call a use-case with the caller's tenant, encode."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc

from api_service import convert
from api_service.request_context import current_principal
from api_service.usecases.admission import SubmissionAdmission
from api_service.usecases.delivery_sets import DeliverySets
from api_service.usecases.job_queries import JobQueries
from api_service.usecases.job_watch import JobWatch
from api_service.usecases.lifecycle import JobLifecycle
from api_service.usecases.resources import ResourceDeletions
from api_service.usecases.schedules import ScheduleService
from api_service.usecases.submission import SubmissionService
from jobs.v1 import jobs_pb2, jobs_pb2_grpc
from shared.domain.errors import Unavailable
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
        deletions: ResourceDeletions | None = None,
        delivery_sets: DeliverySets | None = None,
        schedules: ScheduleService | None = None,
    ) -> None:
        self._schedules = schedules
        self._admission = admission
        self._deletions = deletions or ResourceDeletions(submissions.database)
        self._sets = delivery_sets or DeliverySets(submissions.database, submissions)
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
        plain = convert.plain_batch_from_proto(request.jobs, trace) if request.ids_only else None
        if plain is not None:
            await self._admission.admit(_tenant(), len(plain))
            job_ids = await self._submissions.submit_plain_ids(_tenant(), current_principal().name, plain)
            return jobs_pb2.SubmitJobsResponse(job_ids=job_ids, created=[True] * len(job_ids))
        jobs = [convert.new_job_from_proto(item, f"jobs[{i}].", trace) for i, item in enumerate(request.jobs)]
        await self._admission.admit(_tenant(), len(jobs))
        if request.ids_only:
            answers = await self._submissions.submit_many_ids(_tenant(), current_principal().name, jobs)
            return jobs_pb2.SubmitJobsResponse(
                job_ids=[job_id for job_id, _ in answers], created=[created for _, created in answers]
            )
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

    async def ListJobLogs(self, request: jobs_pb2.ListJobLogsRequest, context: Context) -> jobs_pb2.ListJobLogsResponse:
        lines, after = await self._queries.list_logs(
            _tenant(),
            JobId(request.job_id),
            request.attempt,
            convert.decode_log_token(request.page_token),
            request.page_size,
        )
        return jobs_pb2.ListJobLogsResponse(
            lines=[convert.log_line_to_proto(line) for line in lines], next_page_token=convert.encode_log_token(after)
        )

    async def DeleteResource(
        self, request: jobs_pb2.DeleteResourceRequest, context: Context
    ) -> jobs_pb2.DeleteResourceResponse:
        deletion = await self._deletions.delete(
            _tenant(), current_principal().name, request.resource_key, request.reason
        )
        return convert.deletion_to_proto(deletion)

    async def SubmitDeliverySet(
        self, request: jobs_pb2.SubmitDeliverySetRequest, context: Context
    ) -> jobs_pb2.SubmitDeliverySetResponse:
        new = convert.delivery_set_from_proto(
            request, convert.trace_context_from_metadata(context.invocation_metadata())
        )
        await self._admission.admit(_tenant(), len(new.members) + (1 if new.fan_in else 0))
        stored, created = await self._sets.submit(_tenant(), current_principal().name, new)
        return jobs_pb2.SubmitDeliverySetResponse(set=convert.delivery_set_to_proto(stored), created=created)

    async def GetDeliverySet(self, request: jobs_pb2.GetDeliverySetRequest, context: Context) -> jobs_pb2.DeliverySet:
        after = convert.decode_set_token(request.page_token)
        found = await self._sets.get(_tenant(), request.resource_key, request.resource_version, after)
        return convert.delivery_set_to_proto(found)

    async def GetLatestDeliverySet(
        self, request: jobs_pb2.GetLatestDeliverySetRequest, context: Context
    ) -> jobs_pb2.DeliverySet:
        after = convert.decode_set_token(request.page_token)
        return convert.delivery_set_to_proto(await self._sets.latest_complete(_tenant(), request.resource_key, after))

    def _schedule_service(self) -> ScheduleService:
        if self._schedules is None:
            raise Unavailable("schedules are not served by this replica")
        return self._schedules

    async def CreateSchedule(self, request: jobs_pb2.CreateScheduleRequest, context: Context) -> jobs_pb2.Schedule:
        schedule = await self._schedule_service().create(
            _tenant(), current_principal().name, convert.new_schedule_from_proto(request)
        )
        return convert.schedule_to_proto(schedule)

    async def GetSchedule(self, request: jobs_pb2.GetScheduleRequest, context: Context) -> jobs_pb2.Schedule:
        return convert.schedule_to_proto(await self._schedule_service().get(_tenant(), request.schedule_id))

    async def ListSchedules(
        self, request: jobs_pb2.ListSchedulesRequest, context: Context
    ) -> jobs_pb2.ListSchedulesResponse:
        page = await self._schedule_service().list(_tenant(), request.page_token, request.page_size)
        return jobs_pb2.ListSchedulesResponse(
            schedules=[convert.schedule_to_proto(s) for s in page.schedules], next_page_token=page.next_after_id
        )

    async def PauseSchedule(self, request: jobs_pb2.PauseScheduleRequest, context: Context) -> jobs_pb2.Schedule:
        schedule = await self._schedule_service().pause(_tenant(), request.schedule_id, request.note)
        return convert.schedule_to_proto(schedule)

    async def ResumeSchedule(self, request: jobs_pb2.ResumeScheduleRequest, context: Context) -> jobs_pb2.Schedule:
        schedule = await self._schedule_service().resume(_tenant(), request.schedule_id, request.note)
        return convert.schedule_to_proto(schedule)

    async def TriggerSchedule(
        self, request: jobs_pb2.TriggerScheduleRequest, context: Context
    ) -> jobs_pb2.TriggerScheduleResponse:
        schedule, job = await self._schedule_service().trigger(_tenant(), request.schedule_id)
        return jobs_pb2.TriggerScheduleResponse(
            schedule=convert.schedule_to_proto(schedule), job=convert.job_to_proto(job)
        )

    async def DeleteSchedule(
        self, request: jobs_pb2.DeleteScheduleRequest, context: Context
    ) -> jobs_pb2.DeleteScheduleResponse:
        await self._schedule_service().delete(_tenant(), request.schedule_id)
        return jobs_pb2.DeleteScheduleResponse()
