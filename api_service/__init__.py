"""The gRPC API service: JobService for tenants, WorkerService for worker replicas."""
