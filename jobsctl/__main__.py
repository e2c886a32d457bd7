"""`jobsctl`: a command-line client of jobs.v1.JobService (and, for operators, jobs.v1.AdminService),
talking through the SDK's client and the generated stubs, never the service's code."""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence

import grpc

from durable_jobs import Client, Tls
from durable_jobs.errors import JobsError
from jobs.v1 import admin_pb2_grpc, jobs_pb2_grpc
from jobsctl.admin_commands import ADMIN_COMMANDS
from jobsctl.arguments import TIMEOUT_SECONDS_DEFAULT, UsageError, build_parser
from jobsctl.commands import COMMANDS, Call, Console
from jobsctl.dev import run_dev
from jobsctl.resources import run_resources, run_sets
from jobsctl.rpc_errors import EXIT_UNAVAILABLE, EXIT_USAGE, describe, from_jobs_error, report
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
        with _client(args) as client:
            call = Call(
                jobs_pb2_grpc.JobServiceStub(client.channel),
                args.token,
                args.timeout or TIMEOUT_SECONDS_DEFAULT,
                admin_pb2_grpc.AdminServiceStub(client.channel),
                client,
            )
            try:
                run = {**COMMANDS, **ADMIN_COMMANDS, "resources": run_resources, "sets": run_sets}[args.command]
                return run(call, args, console)
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
    except JobsError as exc:
        return report(from_jobs_error(exc), args.output, console.stderr)
    except KeyboardInterrupt:
        print("jobsctl: interrupted", file=console.stderr)
        return 130


def _client(args: argparse.Namespace) -> Client:
    """The SDK's client (its channel carries every command): plaintext unless a CA is given; a client
    certificate and key make it mutual TLS."""
    if not args.tls_ca and (args.tls_cert or args.tls_key):
        raise UsageError("--tls-cert and --tls-key need --tls-ca")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    tls = Tls(args.tls_ca, args.tls_cert, args.tls_key) if args.tls_ca else None
    try:
        return Client(args.target, args.token, tls=tls, timeout=args.timeout or TIMEOUT_SECONDS_DEFAULT)
    except OSError as exc:
        raise UsageError(f"cannot read a TLS file: {exc}") from None


if __name__ == "__main__":
    sys.exit(main())
