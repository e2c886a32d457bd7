"""Process tier: the real service entry points (`python -m api_service`, `python -m worker_service`,
`jobsctl`) as processes on loopback ports, for what only a process shows: signals, kills, start-up, drain."""
