"""A replica may hold twice its concurrency in leases; its heartbeat carries them all, however many."""

from __future__ import annotations

import time
import uuid

import pytest

from shared.domain.ids import FencingToken, JobId
from shared.domain.jobs import LeaseRef
from tests.process_fixtures import WORKER_TOKEN, ServiceStack
from worker_service.api_client import HEARTBEAT_BATCH_MAX, ApiClient

pytestmark = pytest.mark.timeout(120)


async def test_a_heartbeat_of_more_leases_than_one_call_may_carry_answers_each(service_stack: ServiceStack):
    service_stack.start_api()
    api = ApiClient(service_stack.api_target, WORKER_TOKEN, "many-leases")
    leases = [LeaseRef(JobId(str(uuid.uuid4())), FencingToken(1)) for _ in range(HEARTBEAT_BATCH_MAX + 500)]
    try:
        statuses = await api.heartbeat(leases, 30.0, deadline=time.monotonic() + 60)
    finally:
        await api.close()
    # None of these jobs exists, so no lease is held; what matters is an answer for every one.
    assert len(statuses) == len(leases)
    assert not any(status.held for status in statuses)
