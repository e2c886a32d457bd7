"""Who may connect and who may call: TLS and mutual TLS on the API's port (certificates made by the
test), a plaintext health-only port for probes, and the principals file reloaded on SIGHUP without
disturbing calls in flight."""

from __future__ import annotations

import hashlib
import shutil
import signal
import socket
import ssl
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from jobs.v1 import jobs_pb2, jobs_pb2_grpc
from tests.process_fixtures import WORKER_TOKEN, ServiceStack, free_port, tenant_token, wait_until
from tests.tls_files import KeyPair, TlsFiles, make_tls_files

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

SUCCEEDED = jobs_pb2.JOB_STATE_SUCCEEDED


@pytest.fixture
def tls_files(tmp_path: Path) -> TlsFiles:
    return make_tls_files(tmp_path / "tls")


def _credentials(tls: TlsFiles, client: KeyPair | None) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        tls.ca_cert.read_bytes(),
        client.key.read_bytes() if client else None,
        client.cert.read_bytes() if client else None,
    )


def _submit_over(target: str, credentials: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    channel = grpc.secure_channel(target, credentials) if credentials else grpc.insecure_channel(target)
    with channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        try:
            stub.SubmitJob(
                jobs_pb2.SubmitJobRequest(kind="echo"),
                metadata=(("authorization", f"Bearer {tenant_token('acme')}"),),
                timeout=5,
            )
        except grpc.RpcError as error:
            return error.code()
    return grpc.StatusCode.OK


def _tls_api_env(tls: TlsFiles, health_port: int, *, mutual: bool) -> dict[str, str]:
    env = {
        "JOBS_TLS_CERT_FILE": str(tls.server.cert),
        "JOBS_TLS_KEY_FILE": str(tls.server.key),
        "JOBS_HEALTH_LISTEN": f"127.0.0.1:{health_port}",
    }
    if mutual:
        env["JOBS_TLS_CLIENT_CA_FILE"] = str(tls.ca_cert)
    return env


def _presented_certificate(port: int, tls: TlsFiles) -> bytes:
    """The certificate the API shows a new connection (DER)."""
    context = ssl.create_default_context(cafile=str(tls.ca_cert))
    context.load_cert_chain(tls.client.cert, tls.client.key)
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as wrapped,
    ):
        certificate = wrapped.getpeercert(binary_form=True)
    assert certificate is not None, "the server presented no certificate"
    return certificate


def _der(pair: KeyPair) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pair.cert.read_text())


def test_tls_without_client_certificates(service_stack: ServiceStack, tls_files: TlsFiles) -> None:
    service_stack.channel_credentials = _credentials(tls_files, None)
    service_stack.health_port = free_port()
    service_stack.start_api(**_tls_api_env(tls_files, service_stack.health_port, mutual=False))

    assert _submit_over(service_stack.api_target, _credentials(tls_files, None)) == grpc.StatusCode.OK
    assert _submit_over(service_stack.api_target, None) == grpc.StatusCode.UNAVAILABLE
    assert service_stack.health() == "SERVING"


def test_mutual_tls_for_tenants_and_workers_with_a_plaintext_health_port(
    service_stack: ServiceStack, tls_files: TlsFiles
) -> None:
    service_stack.channel_credentials = _credentials(tls_files, tls_files.client)
    service_stack.health_port = free_port()
    api = service_stack.start_api(**_tls_api_env(tls_files, service_stack.health_port, mutual=True))
    service_stack.start_worker(
        "tls-worker",
        JOBS_TLS_CA_FILE=str(tls_files.ca_cert),
        JOBS_TLS_CLIENT_CERT_FILE=str(tls_files.client.cert),
        JOBS_TLS_CLIENT_KEY_FILE=str(tls_files.client.key),
        JOBS_TLS_SERVER_NAME="localhost",
    )
    client = service_stack.tenant("acme")
    job_id = client.submit("echo", b"over mutual TLS").job.job_id
    wait_until(lambda: client.get(job_id).state == SUCCEEDED, timeout=30, what="the worker to finish over mTLS")
    assert client.result(job_id).payload == b"over mutual TLS"

    target = service_stack.api_target
    assert _submit_over(target, None) == grpc.StatusCode.UNAVAILABLE
    assert _submit_over(target, _credentials(tls_files, None)) == grpc.StatusCode.UNAVAILABLE
    assert _submit_over(target, _credentials(tls_files, tls_files.stranger)) == grpc.StatusCode.UNAVAILABLE
    assert "mutual TLS" in api.log_text()

    # The probe port answers health in plaintext and serves nothing else.
    assert service_stack.health() == "SERVING"
    assert service_stack.health("liveness") == "SERVING"
    with grpc.insecure_channel(f"127.0.0.1:{service_stack.health_port}") as probe_channel:
        with pytest.raises(grpc.RpcError) as raised:
            jobs_pb2_grpc.JobServiceStub(probe_channel).GetJob(jobs_pb2.GetJobRequest(job_id=job_id), timeout=5)
        assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
        status = health_pb2_grpc.HealthStub(probe_channel).Check(health_pb2.HealthCheckRequest(), timeout=5)  # type: ignore[attr-defined]  # the stubs' HealthStub lists no methods
        assert status.status == health_pb2.HealthCheckResponse.SERVING


def test_a_rotated_certificate_is_served_after_sighup(service_stack: ServiceStack, tls_files: TlsFiles) -> None:
    live = KeyPair(tls_files.folder / "live.crt", tls_files.folder / "live.key")
    shutil.copy(tls_files.server.cert, live.cert)
    shutil.copy(tls_files.server.key, live.key)
    service_stack.channel_credentials = _credentials(tls_files, tls_files.client)
    service_stack.health_port = free_port()
    env = _tls_api_env(tls_files, service_stack.health_port, mutual=True)
    env.update(JOBS_TLS_CERT_FILE=str(live.cert), JOBS_TLS_KEY_FILE=str(live.key))
    api = service_stack.start_api(**env)
    port = service_stack.api_port
    assert _presented_certificate(port, tls_files) == _der(tls_files.server)
    client = service_stack.tenant("acme")
    assert client.submit("echo", b"before").created

    rotated = tls_files.issue_server("rotated")
    shutil.copy(rotated.cert, live.cert)
    shutil.copy(rotated.key, live.key)
    api.signal(signal.SIGHUP)
    wait_until(lambda: _presented_certificate(port, tls_files) == _der(rotated), timeout=10, what="the new certificate")
    assert client.submit("echo", b"after, on the connection made before").created

    live.key.write_text("not a key")
    api.signal(signal.SIGHUP)
    wait_until(lambda: "kept the previous TLS configuration" in api.log_text(), timeout=10, what="the refusal")
    assert _presented_certificate(port, tls_files) == _der(rotated)


def _principals_file(entries: dict[str, str]) -> str:
    """{"tenant name" or "worker": token} as TOML."""
    lines = []
    for who, token in entries.items():
        digest = hashlib.sha256(token.encode()).hexdigest()
        role = 'role = "worker"' if who == "worker" else f'tenant = "{who}"'
        lines.append(f'[[principal]]\ntoken_sha256 = "{digest}"\n{role}\n')
    return "\n".join(lines)


def test_sighup_reloads_the_principals_without_dropping_calls_in_flight(service_stack: ServiceStack) -> None:
    api = service_stack.start_api()
    acme = service_stack.tenant("acme")
    job_id = acme.submit("sleep", b'{"seconds": 1}').job.job_id
    stream = acme.stub.WatchJob(jobs_pb2.WatchJobRequest(job_id=job_id), metadata=acme.metadata, timeout=60)
    assert next(stream).state == jobs_pb2.JOB_STATE_PENDING

    service_stack.tokens_file.write_text(
        _principals_file(
            {"globex": tenant_token("globex"), "newcomer": tenant_token("newcomer"), "worker": WORKER_TOKEN}
        )
    )
    api.signal(signal.SIGHUP)
    newcomer = service_stack.tenant("newcomer")
    wait_until(lambda: _status(lambda: newcomer.submit("echo")) == grpc.StatusCode.OK, timeout=10, what="reload")
    assert _status(lambda: acme.submit("echo")) == grpc.StatusCode.UNAUTHENTICATED

    # acme's stream authenticated before the reload and keeps delivering.
    service_stack.start_worker("w1")
    states = [update.state for update in stream]
    assert states[-1] == SUCCEEDED

    service_stack.tokens_file.write_text("[[principal]]\nthis is not TOML")
    api.signal(signal.SIGHUP)
    wait_until(lambda: "kept the previous principals" in api.log_text(), timeout=10, what="the refusal")
    assert _status(lambda: newcomer.submit("echo")) == grpc.StatusCode.OK


def _status(call) -> grpc.StatusCode:
    try:
        call()
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK
