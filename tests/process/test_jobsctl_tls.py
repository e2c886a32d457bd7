"""`python -m jobsctl` against an API that requires (mutual) TLS."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from tests.jobsctl_process import jobsctl
from tests.process_fixtures import ServiceStack, free_port
from tests.tls_files import TlsFiles, make_tls_files

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_jobsctl_speaks_mutual_tls_and_says_what_is_missing(service_stack: ServiceStack, tmp_path: Path) -> None:
    tls: TlsFiles = make_tls_files(tmp_path / "tls")
    service_stack.channel_credentials = grpc.ssl_channel_credentials(
        tls.ca_cert.read_bytes(), tls.client.key.read_bytes(), tls.client.cert.read_bytes()
    )
    service_stack.health_port = free_port()
    service_stack.start_api(
        JOBS_TLS_CERT_FILE=str(tls.server.cert),
        JOBS_TLS_KEY_FILE=str(tls.server.key),
        JOBS_TLS_CLIENT_CA_FILE=str(tls.ca_cert),
        JOBS_HEALTH_LISTEN=f"127.0.0.1:{service_stack.health_port}",
    )
    target = service_stack.api_target
    mutual = ("--tls-ca", str(tls.ca_cert), "--tls-cert", str(tls.client.cert), "--tls-key", str(tls.client.key))

    submitted = jobsctl(target, *mutual, "submit", "echo", "--payload", "over tls")
    assert submitted.code == 0, submitted.stderr
    shown = jobsctl(target, *mutual, "get", submitted.text.strip())
    assert shown.code == 0 and "PENDING" in shown.text

    plaintext = jobsctl(target, "get", submitted.text.strip())
    assert plaintext.code == 5, plaintext.stderr  # UNAVAILABLE: the handshake fails
    without_client_cert = jobsctl(target, "--tls-ca", str(tls.ca_cert), "get", submitted.text.strip())
    assert without_client_cert.code == 5, without_client_cert.stderr
    half = jobsctl(target, "--tls-ca", str(tls.ca_cert), "--tls-cert", str(tls.client.cert), "list")
    assert (half.code, "go together" in half.stderr) == (2, True)
