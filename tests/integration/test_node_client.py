"""A caller in a second language: tests/node_client/jobs_client.mjs (@grpc/grpc-js and @grpc/proto-loader
on the .proto files alone, none of our generated code) submits, watches and reads a result against the
API and a worker (in the test process), and decodes a refusal's google.rpc details from the vendored protos.
`make node-deps` (a prerequisite of `make test`) installs its packages from package-lock.json."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from jobs.v1 import jobs_pb2
from tests.process_fixtures import REPO_ROOT, ServiceStack, tenant_token

pytestmark = pytest.mark.timeout(180)

CLIENT = REPO_ROOT / "tests" / "node_client" / "jobs_client.mjs"
NODE_MODULES = REPO_ROOT / "node_modules"
CLIENT_TIMEOUT_SECONDS = 120


def _run_client(target: str, token: str, payload: str) -> dict:
    node = shutil.which("node")
    assert node, "node is not on PATH: `make system-deps` installs it"
    assert (NODE_MODULES / "@grpc" / "grpc-js").is_dir(), "the Node packages are missing: run `make node-deps`"
    done = subprocess.run(
        [node, str(CLIENT)],
        env={**os.environ, "JOBS_API_TARGET": target, "JOBS_TOKEN": token, "JOBS_PAYLOAD": payload},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_SECONDS,
        check=False,
    )
    assert done.returncode == 0, f"the Node client failed:\n{done.stderr}\n{done.stdout}"
    return json.loads(done.stdout)


def test_a_node_client_submits_watches_and_reads_the_result(service_stack: ServiceStack) -> None:
    service_stack.start_api()
    service_stack.start_worker("w1")
    payload = "hello from node: ünïcode survives"

    report = _run_client(service_stack.api_target, tenant_token("acme"), payload)

    assert report["created"] is True
    states = [seen["state"] for seen in report["states"]]
    sequences = [seen["sequence"] for seen in report["states"]]
    assert states[-1] == "JOB_STATE_SUCCEEDED"
    assert sequences == sorted(set(sequences)), "WatchJob sequences rise"
    assert (report["result_payload"], report["result_attempt"]) == (payload, 1)
    assert report["labels"] == {"client": "node"}
    # The same job, read back through the Python stubs: the Node client's calls really happened.
    job = service_stack.tenant("acme").get(report["job_id"])
    assert job.state == jobs_pb2.JOB_STATE_SUCCEEDED
    assert service_stack.tenant("acme").result(report["job_id"]).payload == payload.encode()

    refusal = report["refusal"]
    assert refusal["code"] == "INVALID_ARGUMENT"
    details = {detail["type"]: detail["value"] for detail in refusal["details"]}
    assert details["google.rpc.ErrorInfo"]["domain"] == "jobs.v1"
    assert details["google.rpc.ErrorInfo"]["reason"] == "INVALID_ARGUMENT"
    assert [v["field"] for v in details["google.rpc.BadRequest"]["field_violations"]] == ["kind"]
