"""Shared fixtures. Database fixtures (a migrated template per session, a fresh clone per test) live in
tests/db_fixtures.py; process-level fixtures for end-to-end tests belong below."""

pytest_plugins = (
    "tests.db_fixtures",
    "tests.process_fixtures",
    "tests.database_roles",
    "tests.prometheus_server",
    "tests.otlp_receiver",
)
