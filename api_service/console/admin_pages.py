"""The console's operator pages beyond one job: bulk cancel and retry by the current search (a dry run's
count first), kinds with their pauses, limits and tenant weights. Every change goes through the AdminService's own
use-cases, so it is checked, applied and recorded (who, why) exactly as over gRPC."""

from __future__ import annotations

import urllib.parse
from typing import Any

import jinja2
from aiohttp import web
from multidict import MultiDict

from api_service.console import search_form
from api_service.console.pages import writer_and_reason
from api_service.console.rendering import render
from api_service.console.security import operator_of
from api_service.usecases.admin_config import AdminConfig
from api_service.usecases.admin_jobs import AdminJobs
from shared.domain.admin import Actor, BulkOutcome, BulkRequest, LimitSpec
from shared.domain.errors import FailedPrecondition, FieldViolation, InvalidArgument
from shared.domain.ids import TenantId

BULK_ACTIONS = ("cancel", "retry")
# How many of a bulk action's skipped jobs the outcome names; the count covers them all.
SKIPS_SHOWN = 5


class AdminPages:
    def __init__(self, templates: jinja2.Environment, jobs: AdminJobs, config: AdminConfig) -> None:
        self._templates = templates
        self._jobs = jobs
        self._config = config

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/jobs/bulk", self.bulk),
            web.get("/kinds", self.kinds),
            web.post("/kinds/pause", self.pause_kind),
            web.post("/kinds/resume", self.resume_kind),
            web.get("/limits", self.limits),
            web.post("/limits/set", self.set_limit),
            web.post("/limits/delete", self.delete_limit),
            web.post("/tenants/weight", self.set_tenant_weight),
        ]

    def _page(self, request: web.Request, name: str, **context: Any) -> web.Response:
        operator = operator_of(request)
        flash = operator.session.take_flash()
        return render(self._templates, name, operator=operator, flash=flash, path=request.path, **context)

    async def bulk(self, request: web.Request) -> web.StreamResponse:
        """Without `expected_count`: the dry run, answered with a page that asks to confirm its count.
        With it: the action, bounded by that count, then back to the search with what it did."""
        operator, reason = await writer_and_reason(request)
        form = await request.post()
        action = str(form.get("action", ""))
        if action not in BULK_ACTIONS:
            raise InvalidArgument(FieldViolation("action", "must be cancel or retry"))
        filter_query = str(form.get("filter", ""))
        job_filter = search_form.parse_search(MultiDict(urllib.parse.parse_qsl(filter_query)))
        expected = str(form.get("expected_count", ""))
        bulk = BulkRequest(
            filter=job_filter,
            reason=reason,
            dry_run=not expected,
            expected_count=int(expected) if expected.isdigit() else 0,
            accept_duplicate_risk=form.get("accept_duplicate_risk") == "yes",
        )
        actor = Actor(operator.name)
        run = self._jobs.cancel_jobs if action == "cancel" else self._jobs.retry_jobs
        try:
            outcome = await run(actor, bulk)
        except FailedPrecondition as exc:
            operator.session.flash.append(("error", exc.message))
            raise web.HTTPSeeOther(f"/jobs?{filter_query}") from None
        if bulk.dry_run:
            # Shown as the operator typed the filter, not URL-encoded.
            filter_text = ", ".join(f"{k}={v}" for k, v in urllib.parse.parse_qsl(filter_query))
            return self._page(
                request,
                "bulk_confirm.html",
                outcome=outcome,
                bulk=bulk,
                action=action,
                filter_query=filter_query,
                filter_text=filter_text,
            )
        _flash_outcome(operator.session.flash, action, outcome)
        raise web.HTTPSeeOther(f"/jobs?{filter_query}")

    async def kinds(self, request: web.Request) -> web.StreamResponse:
        return self._page(request, "kinds.html", kinds=await self._config.list_kinds())

    async def pause_kind(self, request: web.Request) -> web.StreamResponse:
        operator, reason = await writer_and_reason(request)
        kind = str((await request.post()).get("kind", ""))
        await self._config.pause_kind(Actor(operator.name), kind, reason)
        operator.session.flash.append(("ok", f"Kind {kind} paused: none of its jobs is claimed until resumed."))
        raise web.HTTPSeeOther("/kinds")

    async def resume_kind(self, request: web.Request) -> web.StreamResponse:
        operator, reason = await writer_and_reason(request)
        kind = str((await request.post()).get("kind", ""))
        await self._config.resume_kind(Actor(operator.name), kind, reason)
        operator.session.flash.append(("ok", f"Kind {kind} resumed."))
        raise web.HTTPSeeOther("/kinds")

    async def limits(self, request: web.Request) -> web.StreamResponse:
        return self._page(
            request,
            "limits.html",
            limits=await self._config.list_limits(),
            weights=await self._config.list_tenant_weights(),
        )

    async def set_limit(self, request: web.Request) -> web.StreamResponse:
        operator, reason = await writer_and_reason(request)
        form = await request.post()
        spec = LimitSpec.requested(
            key=str(form.get("key", "")).strip(),
            max_running=_integer(form.get("max_running"), "max_running"),
            rate_per_second=_number(form.get("rate_per_second"), "rate_per_second"),
            burst=_integer(form.get("burst"), "burst"),
        )
        await self._config.set_limit(Actor(operator.name), spec, reason)
        operator.session.flash.append(("ok", f"Limit on {spec.key} set."))
        raise web.HTTPSeeOther("/limits")

    async def delete_limit(self, request: web.Request) -> web.StreamResponse:
        operator, reason = await writer_and_reason(request)
        key = str((await request.post()).get("key", ""))
        deleted = await self._config.delete_limit(Actor(operator.name), key, reason)
        operator.session.flash.append(("ok", f"Limit on {key} removed." if deleted else f"{key} had no limit."))
        raise web.HTTPSeeOther("/limits")

    async def set_tenant_weight(self, request: web.Request) -> web.StreamResponse:
        operator, reason = await writer_and_reason(request)
        form = await request.post()
        tenant = str(form.get("tenant", "")).strip()
        weight = _integer(form.get("weight"), "weight")
        await self._config.set_tenant_weight(Actor(operator.name), TenantId(tenant), weight, reason)
        operator.session.flash.append(("ok", f"Tenant {tenant} now weighs {weight}."))
        raise web.HTTPSeeOther("/limits")


def _number(raw: object, name: str) -> float:
    """A form's number field; empty means 0 (no bound). The use-case checks the range."""
    text = str(raw or "0").strip() or "0"
    try:
        return float(text)
    except ValueError:
        raise InvalidArgument(FieldViolation(name, "must be a number")) from None


def _integer(raw: object, name: str) -> int:
    """A form's whole-number field; empty means 0. "2.5", "nan" or "1e400" are refused, not rounded."""
    text = str(raw or "0").strip() or "0"
    try:
        return int(text)
    except ValueError:
        raise InvalidArgument(FieldViolation(name, "must be a whole number")) from None


def _flash_outcome(flash: list[tuple[str, str]], action: str, outcome: BulkOutcome) -> None:
    done = "cancelled" if action == "cancel" else "reopened"
    flash.append(("ok", f"{outcome.changed} of {outcome.matched} matching jobs {done}."))
    if outcome.skipped_count:
        flash.append(("error", f"{outcome.skipped_count} skipped, changed in between or refused:"))
        for skip in outcome.skipped[:SKIPS_SHOWN]:
            flash.append(("error", f"{skip.job_id} ({skip.tenant}): {skip.message}"))
