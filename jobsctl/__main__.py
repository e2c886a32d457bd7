"""`jobsctl`: a command-line client of jobs.v1.JobService (and, for operators, jobs.v1.AdminService),
talking only through the generated stubs."""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence
from pathlib import Path

import grpc

from jobs.v1 import admin_pb2_grpc, jobs_pb2_grpc
from jobsctl.admin_commands import ADMIN_COMMANDS
from jobsctl.arguments import TIMEOUT_SECONDS_DEFAULT, UsageError, build_parser
from jobsctl.commands import COMMANDS, Call, Console
from jobsctl.dev import run_dev
from jobsctl.rpc_errors import EXIT_UNAVAILABLE, EXIT_USAGE, describe, report
from jobsctl.watch import WaitTimedOut


def main(argv: Sequence[str] | None = None, console: Console | None = None) -> int:
    """Returns the process exit code; argparse itself exits with 2 on malformed arguments."""
    console = console or Console(sys.stdin.buffer, sys.stdout, sys.stdout.buffer, sys.stderr)
    args = build_parser().parse_args(argv)
    if args.command == "dev":
        return run_dev(console.stderr)
    if not args.token:
        print("jobsctl: no token: pass --token or set JOBS_TOKEN", file=console.stderr)
        return EXIT_USAGE
    try:
        with _channel(args) as channel:
            call = Call(
                jobs_pb2_grpc.JobServiceStub(channel),
                args.token,
                args.timeout or TIMEOUT_SECONDS_DEFAULT,
                admin_pb2_grpc.AdminServiceStub(channel),
            )
            try:
                return {**COMMANDS, **ADMIN_COMMANDS}[args.command](call, args, console)
            finally:
                # Finished calls caught in reference cycles must go while gRPC's threads still run:
                # collected at interpreter exit, one can wait for ever on a lock a frozen thread holds.
                gc.collect()
    except UsageError as exc:
        print(f"jobsctl: {exc}", file=console.stderr)
        return EXIT_USAGE
    except WaitTimedOut as exc:
        print(f"jobsctl: {exc}", file=console.stderr)
        return EXIT_UNAVAILABLE
    except grpc.RpcError as exc:
        return report(describe(exc), args.output, console.stderr)
    except KeyboardInterrupt:
        print("jobsctl: interrupted", file=console.stderr)
        return 130


def _channel(args: argparse.Namespace) -> grpc.Channel:
    """Plaintext unless a CA is given; a client certificate and key make it mutual TLS."""
    if not args.tls_ca:
        if args.tls_cert or args.tls_key:
            raise UsageError("--tls-cert and --tls-key need --tls-ca")
        return grpc.insecure_channel(args.target)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    try:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=Path(args.tls_ca).read_bytes(),
            private_key=Path(args.tls_key).read_bytes() if args.tls_key else None,
            certificate_chain=Path(args.tls_cert).read_bytes() if args.tls_cert else None,
        )
    except OSError as exc:
        raise UsageError(f"cannot read a TLS file: {exc}") from None
    return grpc.secure_channel(args.target, credentials)


if __name__ == "__main__":
    sys.exit(main())
