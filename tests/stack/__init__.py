"""Stack tier: whole-stack scenarios with more real parts than the services: a private PostgreSQL to
restart or fail over, PgBouncer, a faulty proxy, Prometheus, a browser, the compose stack."""
