"""Bounded label values, so a new tenant cannot grow the metrics without limit.

Two rules, one per kind of metric (docs/METRICS.md explains the choice):
- counters in a worker replica keep the first `limit` tenants that replica sees, because a counter's
  series must not change its label once it exists;
- gauges rebuilt from a database snapshot name the `limit` tenants with the most jobs in that snapshot,
  since every snapshot replaces the previous one whole.
Either way, every other tenant is reported as "other".
"""

from __future__ import annotations

from collections.abc import Mapping

OTHER_TENANT_LABEL = "other"
TENANT_LIMIT_DEFAULT = 50


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


def top_tenants(volume_by_tenant: Mapping[str, int], limit: int) -> frozenset[str]:
    """The `limit` tenants with the highest volume; ties go to the alphabetically first, so that equal
    snapshots always name the same tenants."""
    ranked = sorted(volume_by_tenant.items(), key=lambda item: (-item[1], item[0]))
    return frozenset(tenant for tenant, _ in ranked[:limit])
