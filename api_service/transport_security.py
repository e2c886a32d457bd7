"""TLS for the API's gRPC port: a certificate and key from files, optionally a CA that every client's
certificate must chain to (mutual TLS). The files are read again on request (SIGHUP): connections made
after that use the new certificate, connections already open keep theirs."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import grpc

from shared.env_settings import SettingsError, env_optional


@dataclass(frozen=True)
class ServerTlsFiles:
    cert_file: Path
    key_file: Path
    # Set: mutual TLS, and a client without a certificate signed by this CA cannot connect.
    client_ca_file: Path | None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ServerTlsFiles | None:
        """None (plaintext) unless JOBS_TLS_CERT_FILE and JOBS_TLS_KEY_FILE are both set."""
        cert, key = env_optional(env, "JOBS_TLS_CERT_FILE"), env_optional(env, "JOBS_TLS_KEY_FILE")
        client_ca = env_optional(env, "JOBS_TLS_CLIENT_CA_FILE")
        if not cert and not key:
            if client_ca:
                raise SettingsError("JOBS_TLS_CLIENT_CA_FILE needs JOBS_TLS_CERT_FILE and JOBS_TLS_KEY_FILE")
            return None
        if not (cert and key):
            raise SettingsError("JOBS_TLS_CERT_FILE and JOBS_TLS_KEY_FILE must be set together")
        files = cls(Path(cert), Path(key), Path(client_ca) if client_ca else None)
        files.read()  # fail at start, not at the first handshake
        return files

    def read(self) -> grpc.ServerCertificateConfiguration:
        """Raises SettingsError when a file is missing, unparsable, or the key does not match the certificate."""
        try:
            # Only to check the files: gRPC does the handshakes with its own TLS stack.
            check = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            check.load_cert_chain(self.cert_file, self.key_file)
            if self.client_ca_file:
                check.load_verify_locations(cafile=self.client_ca_file)
            pair = (self.key_file.read_bytes(), self.cert_file.read_bytes())
            client_ca = self.client_ca_file.read_bytes() if self.client_ca_file else None
        except (OSError, ssl.SSLError) as exc:
            raise SettingsError(f"TLS files unusable: {exc}") from None
        return grpc.ssl_server_certificate_configuration([pair], root_certificates=client_ca)


class ReloadableServerCredentials:
    def __init__(self, files: ServerTlsFiles) -> None:
        self._files = files
        self._next: grpc.ServerCertificateConfiguration | None = None
        # gRPC documents that the fetcher may return None (keep the current configuration); the stubs
        # leave that out.
        fetcher = cast(Callable[[], grpc.ServerCertificateConfiguration], self._fetch_next)
        self.credentials = grpc.dynamic_ssl_server_credentials(
            files.read(), fetcher, require_client_authentication=files.client_ca_file is not None
        )

    def reload(self) -> None:
        """Reads the files again for the next handshakes; raises SettingsError and keeps the current
        certificate when they are unusable."""
        self._next = self._files.read()

    def _fetch_next(self) -> grpc.ServerCertificateConfiguration | None:
        # Called by gRPC before each handshake; None keeps the configuration it has.
        configuration, self._next = self._next, None
        return configuration
