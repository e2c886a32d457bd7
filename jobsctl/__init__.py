"""Command-line client of the job service: `jobsctl submit|get|result|list`."""
