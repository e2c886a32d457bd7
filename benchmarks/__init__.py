"""`make bench`: throughput, latency and memory of the service pair, measured against their limits."""
