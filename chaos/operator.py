"""The operator of a chaos run: sets the limits before the workload starts, then pauses and resumes one
kind while it runs, through the AdminService like a person with `jobsctl` would."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence

from chaos import handlers
from chaos.calls import RESUBMIT_DELAY_FIRST_SECONDS, Answer, Caller, backoff, unary
from jobs.v1 import admin_pb2, admin_pb2_grpc

PAUSED_KIND = handlers.PAUSABLE
# How long the kind stays paused, and then resumed. Longer than the checker's slack for a claim that
# began before the pause committed (chaos/checks/transitions.py), so the window it checks is not empty.
PAUSE_SECONDS = (5.0, 20.0)


class Operator:
    def __init__(self, caller: Caller, stubs: Sequence[admin_pb2_grpc.AdminServiceStub]) -> None:
        self.caller = caller
        self._stubs = stubs
        self._rng: random.Random = caller.rng

    def _stub(self) -> admin_pb2_grpc.AdminServiceStub:
        return self._rng.choice(self._stubs)

    async def _until_definite(self, send_once: Callable[[], Awaitable[Answer]]) -> Answer:
        delay = RESUBMIT_DELAY_FIRST_SECONDS
        while True:
            answer = await send_once()
            if not answer.indeterminate:
                return answer
            delay = await backoff(delay, self._rng)

    async def set_limits(self, limits: Mapping[str, int]) -> None:
        for key, max_running in limits.items():
            request = admin_pb2.SetLimitRequest(key=key, max_running=max_running, reason="chaos run")

            async def send(request: admin_pb2.SetLimitRequest = request) -> Answer:
                return await self.caller.call(
                    "set_limit",
                    unary(self._stub().SetLimit, request),
                    lambda response: {"max_running": response.limit.max_running},
                    key=request.key,
                    max_running=request.max_running,
                )

            answer = await self._until_definite(send)
            if not answer.ok:
                raise RuntimeError(f"SetLimit {key}: {answer.code} {answer.reason}")

    async def _pause(self) -> Answer:
        return await self.caller.call(
            "pause_kind",
            unary(self._stub().PauseKind, admin_pb2.PauseKindRequest(kind=PAUSED_KIND, reason="chaos run")),
            lambda response: {"paused": response.kind.paused},
            kind=PAUSED_KIND,
        )

    async def _resume(self) -> Answer:
        return await self.caller.call(
            "resume_kind",
            unary(self._stub().ResumeKind, admin_pb2.ResumeKindRequest(kind=PAUSED_KIND, reason="chaos run")),
            lambda response: {"paused": response.kind.paused},
            kind=PAUSED_KIND,
        )

    async def pause_and_resume(self, stop: asyncio.Event) -> None:
        """Until `stop`; the kind is left resumed, so that its jobs can settle."""
        try:
            while not stop.is_set():
                await self._sleep(stop)
                if stop.is_set():
                    break
                await self._until_definite(self._pause)
                await self._sleep(stop)
                await self._until_definite(self._resume)
        finally:
            await self._until_definite(self._resume)

    async def _sleep(self, stop: asyncio.Event) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), self._rng.uniform(*PAUSE_SECONDS))
