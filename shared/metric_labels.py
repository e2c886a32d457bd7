"""Bounded label values, so a new tenant cannot grow the metrics without limit."""

from __future__ import annotations

OTHER_TENANT_LABEL = "other"


class TenantLabeler:
    """The first `limit` distinct tenants keep their names; later ones share the label "other"."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._known: set[str] = set()

    def __call__(self, tenant: str) -> str:
        if tenant in self._known:
            return tenant
        if len(self._known) < self._limit:
            self._known.add(tenant)
            return tenant
        return OTHER_TENANT_LABEL
