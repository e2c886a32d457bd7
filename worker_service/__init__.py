"""Worker replicas: claim jobs from PostgreSQL, run handlers, report through the API with fencing tokens."""
