"""jobs.v1.AdminService: decode, call an admin use-case with the operator as actor, encode."""

from __future__ import annotations

from typing import Any, TypeAlias

import grpc

from api_service import admin_convert, convert
from api_service.request_context import current_principal
from api_service.usecases.admin_config import AdminConfig
from api_service.usecases.admin_jobs import AdminJobs
from jobs.v1 import admin_pb2, admin_pb2_grpc
from shared.domain.admin import Actor
from shared.domain.ids import JobId, TenantId

# The asyncio server's context (a string: the stubs' generic class is not subscriptable at run time).
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


def _actor() -> Actor:
    return Actor(current_principal().name)


class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, config: AdminConfig, jobs: AdminJobs) -> None:
        self._config = config
        self._jobs = jobs

    async def SetLimit(self, request: admin_pb2.SetLimitRequest, context: Context) -> admin_pb2.SetLimitResponse:
        limit = await self._config.set_limit(_actor(), admin_convert.limit_spec_from_proto(request), request.reason)
        return admin_pb2.SetLimitResponse(limit=admin_convert.limit_to_proto(limit))

    async def DeleteLimit(
        self, request: admin_pb2.DeleteLimitRequest, context: Context
    ) -> admin_pb2.DeleteLimitResponse:
        deleted = await self._config.delete_limit(_actor(), request.key, request.reason)
        return admin_pb2.DeleteLimitResponse(deleted=deleted)

    async def ListLimits(self, request: admin_pb2.ListLimitsRequest, context: Context) -> admin_pb2.ListLimitsResponse:
        limits = await self._config.list_limits()
        return admin_pb2.ListLimitsResponse(limits=[admin_convert.limit_to_proto(limit) for limit in limits])

    async def SetTenantWeight(
        self, request: admin_pb2.SetTenantWeightRequest, context: Context
    ) -> admin_pb2.SetTenantWeightResponse:
        stored = await self._config.set_tenant_weight(
            _actor(), TenantId(request.tenant), request.weight, request.reason
        )
        return admin_pb2.SetTenantWeightResponse(tenant_weight=admin_convert.tenant_weight_to_proto(stored))

    async def ListTenantWeights(
        self, request: admin_pb2.ListTenantWeightsRequest, context: Context
    ) -> admin_pb2.ListTenantWeightsResponse:
        weights = await self._config.list_tenant_weights()
        return admin_pb2.ListTenantWeightsResponse(
            tenant_weights=[admin_convert.tenant_weight_to_proto(w) for w in weights]
        )

    async def ListKinds(self, request: admin_pb2.ListKindsRequest, context: Context) -> admin_pb2.ListKindsResponse:
        kinds = await self._config.list_kinds(include_retired=request.include_retired)
        return admin_pb2.ListKindsResponse(kinds=[admin_convert.kind_to_proto(k) for k in kinds])

    async def PauseKind(self, request: admin_pb2.PauseKindRequest, context: Context) -> admin_pb2.PauseKindResponse:
        status = await self._config.pause_kind(_actor(), request.kind, request.reason)
        return admin_pb2.PauseKindResponse(kind=admin_convert.kind_to_proto(status))

    async def ResumeKind(self, request: admin_pb2.ResumeKindRequest, context: Context) -> admin_pb2.ResumeKindResponse:
        status = await self._config.resume_kind(_actor(), request.kind, request.reason)
        return admin_pb2.ResumeKindResponse(kind=admin_convert.kind_to_proto(status))

    async def RetireKind(self, request: admin_pb2.RetireKindRequest, context: Context) -> admin_pb2.RetireKindResponse:
        await self._config.retire_kind(_actor(), request.kind, request.reason)
        return admin_pb2.RetireKindResponse(kind=request.kind)

    async def SearchJobs(self, request: admin_pb2.SearchJobsRequest, context: Context) -> admin_pb2.SearchJobsResponse:
        page = await self._jobs.search(
            admin_convert.job_filter_from_proto(request.filter),
            convert.decode_page_token(request.page_token),
            request.page_size,
        )
        return admin_pb2.SearchJobsResponse(
            jobs=[admin_convert.tenant_job_to_proto(job) for job in page.jobs],
            next_page_token=convert.encode_page_token(page.next_cursor),
        )

    async def GetJob(
        self, request: admin_pb2.AdminServiceGetJobRequest, context: Context
    ) -> admin_pb2.AdminServiceGetJobResponse:
        job = await self._jobs.get_job(JobId(request.job_id))
        return admin_pb2.AdminServiceGetJobResponse(job=admin_convert.tenant_job_to_proto(job))

    async def ListJobEvents(
        self, request: admin_pb2.AdminServiceListJobEventsRequest, context: Context
    ) -> admin_pb2.AdminServiceListJobEventsResponse:
        events, after = await self._jobs.list_events(
            JobId(request.job_id), convert.decode_event_token(request.page_token), request.page_size
        )
        return admin_pb2.AdminServiceListJobEventsResponse(
            events=[convert.event_to_proto(e) for e in events], next_page_token=convert.encode_event_token(after)
        )

    async def CancelJobs(self, request: admin_pb2.CancelJobsRequest, context: Context) -> admin_pb2.CancelJobsResponse:
        outcome = await self._jobs.cancel_jobs(_actor(), admin_convert.bulk_from_proto(request))
        return admin_convert.cancel_jobs_to_proto(outcome)

    async def RetryJobs(self, request: admin_pb2.RetryJobsRequest, context: Context) -> admin_pb2.RetryJobsResponse:
        outcome = await self._jobs.retry_jobs(_actor(), admin_convert.bulk_from_proto(request))
        return admin_convert.retry_jobs_to_proto(outcome)
