"""Identifier types, so a tenant name is never passed where a job id belongs."""

from typing import NewType

JobId = NewType("JobId", str)
TenantId = NewType("TenantId", str)
FencingToken = NewType("FencingToken", int)
