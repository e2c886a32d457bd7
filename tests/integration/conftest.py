"""In this tier the services run inside the test process: `service_stack` is the in-process stack of
tests/in_process_services.py (the API's `serve()` and the worker's `run()` on threads), so a test written
against a ServiceStack runs here unchanged, without a process's start-up."""

from __future__ import annotations

import pytest

from tests.in_process_services import InProcessStack


@pytest.fixture
def service_stack(in_process_stack: InProcessStack) -> InProcessStack:
    return in_process_stack
