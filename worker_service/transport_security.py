"""TLS toward the API: the CA that signed the API's certificate, and this worker's own certificate when
the API requires mutual TLS. Read once at start; a worker picks up rotated files when it restarts."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc

from shared.env_settings import SettingsError, env_optional


@dataclass(frozen=True)
class ClientTlsFiles:
    ca_file: Path
    client_cert_file: Path | None
    client_key_file: Path | None
    # The name the API's certificate must carry, when it is not the host in JOBS_API_TARGET.
    server_name: str | None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ClientTlsFiles | None:
        """None (plaintext) unless JOBS_TLS_CA_FILE is set."""
        ca = env_optional(env, "JOBS_TLS_CA_FILE")
        cert, key = env_optional(env, "JOBS_TLS_CLIENT_CERT_FILE"), env_optional(env, "JOBS_TLS_CLIENT_KEY_FILE")
        if not ca:
            if cert or key:
                raise SettingsError("JOBS_TLS_CLIENT_CERT_FILE and JOBS_TLS_CLIENT_KEY_FILE need JOBS_TLS_CA_FILE")
            return None
        if bool(cert) != bool(key):
            raise SettingsError("JOBS_TLS_CLIENT_CERT_FILE and JOBS_TLS_CLIENT_KEY_FILE must be set together")
        files = cls(
            Path(ca),
            Path(cert) if cert else None,
            Path(key) if key else None,
            env_optional(env, "JOBS_TLS_SERVER_NAME"),
        )
        files.credentials()  # fail at start when a file is missing
        return files

    def credentials(self) -> grpc.ChannelCredentials:
        try:
            return grpc.ssl_channel_credentials(
                root_certificates=self.ca_file.read_bytes(),
                private_key=self.client_key_file.read_bytes() if self.client_key_file else None,
                certificate_chain=self.client_cert_file.read_bytes() if self.client_cert_file else None,
            )
        except OSError as exc:
            raise SettingsError(f"TLS files unreadable: {exc}") from None

    def channel_options(self) -> list[tuple[str, str]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []
