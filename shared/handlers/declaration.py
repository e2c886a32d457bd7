"""`JobKinds` under its first import path; the SDK (`durable_jobs.declaration`) owns it."""

from durable_jobs.declaration import JobKinds, decode_payload, typed_handler

__all__ = ["JobKinds", "decode_payload", "typed_handler"]
