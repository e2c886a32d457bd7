"""Integration tier: a fresh PostgreSQL database per test; the code under test runs inside the test process."""
