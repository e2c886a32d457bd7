"""The google.rpc details of a gRPC error, read where the SDK reads them (durable_jobs.rpc_details)."""

from durable_jobs.rpc_details import STATUS_DETAILS_METADATA_KEY, RpcErrorDetails, rpc_error_details

__all__ = ["STATUS_DETAILS_METADATA_KEY", "RpcErrorDetails", "rpc_error_details"]
