"""Certificates for TLS tests, made by the `openssl` command line in a temporary folder: a CA, a server
certificate for 127.0.0.1 and localhost, and client certificates signed by that CA or by another."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

DAYS_VALID = "2"


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class TlsFiles:
    ca_cert: Path
    server: KeyPair
    client: KeyPair
    # Signed by a CA the server does not trust.
    stranger: KeyPair
    folder: Path

    def issue_server(self, name: str) -> KeyPair:
        """Another server certificate from the same CA (for rotation)."""
        return _issue(
            self.folder,
            name,
            "/CN=localhost",
            self.folder / "ca",
            "serverAuth",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        )


def _run(*args: str) -> None:
    completed = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if completed.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)}: {completed.stderr}")


def _make_ca(folder: Path, name: str) -> Path:
    base = folder / name
    _run(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{base}.key",
        "-out",
        f"{base}.crt",
        "-days",
        DAYS_VALID,
        "-subj",
        f"/CN={name}",
    )
    return base


def _issue(folder: Path, name: str, subject: str, ca: Path, usage: str, extra: str = "") -> KeyPair:
    base = folder / name
    _run(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{base}.key",
        "-out",
        f"{base}.csr",
        "-subj",
        subject,
    )
    extensions = folder / f"{name}.ext"
    extensions.write_text(f"extendedKeyUsage={usage}\n" + (f"{extra}\n" if extra else ""))
    _run(
        "x509",
        "-req",
        "-in",
        f"{base}.csr",
        "-CA",
        f"{ca}.crt",
        "-CAkey",
        f"{ca}.key",
        "-CAcreateserial",
        "-out",
        f"{base}.crt",
        "-days",
        DAYS_VALID,
        "-extfile",
        str(extensions),
    )
    return KeyPair(Path(f"{base}.crt"), Path(f"{base}.key"))


def make_tls_files(folder: Path) -> TlsFiles:
    if shutil.which("openssl") is None:
        pytest.fail("the TLS tests make their certificates with the openssl command, which is not installed")
    folder.mkdir(parents=True, exist_ok=True)
    ca = _make_ca(folder, "ca")
    other_ca = _make_ca(folder, "other-ca")
    return TlsFiles(
        ca_cert=Path(f"{ca}.crt"),
        server=_issue(folder, "server", "/CN=localhost", ca, "serverAuth", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        client=_issue(folder, "worker", "/CN=worker", ca, "clientAuth"),
        stranger=_issue(folder, "stranger", "/CN=stranger", other_ca, "clientAuth"),
        folder=folder,
    )
