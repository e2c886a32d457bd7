"""What every process exports about itself: process_* and python_* metrics, and jobs_build_info.

The services use registries of their own (no global state), and prometheus-client registers its
process, platform and garbage-collector collectors only on its global registry: without this module a
replica's memory, CPU, open files and restarts would be invisible.
"""

from __future__ import annotations

from importlib import metadata

from prometheus_client import CollectorRegistry, Gauge, GCCollector, PlatformCollector, ProcessCollector

DISTRIBUTION_NAME = "durable-jobs"
VERSION_UNKNOWN = "unknown"


def installed_version() -> str:
    """The installed distribution's version; a source tree run without installing has none."""
    try:
        return metadata.version(DISTRIBUTION_NAME)
    except metadata.PackageNotFoundError:
        return VERSION_UNKNOWN


def register_process_metrics(registry: CollectorRegistry, component: str) -> None:
    """process_* (CPU, memory, file descriptors, start time), python_info, python_gc_*, and
    jobs_build_info{version, component} = 1, which tells what runs where and lets alerts see that a
    component is absent."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    build_info = Gauge(
        "jobs_build_info",
        "Always 1: the version of the service this process runs, and which component it is (api, worker).",
        ["version", "component"],
        registry=registry,
    )
    build_info.labels(installed_version(), component).set(1)
