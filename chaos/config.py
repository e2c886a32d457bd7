"""What a chaos run is told: its length, its seed, the faults and their pace, the cluster's shape."""

from __future__ import annotations

import enum
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from shared.env_settings import env_float, env_int, env_optional

REPO_ROOT = Path(__file__).resolve().parent.parent
SECONDS_DEFAULT = 300.0
# The mean time between two faults of one kind: at this pace a 30-minute run brings about 600 of each.
FAULT_INTERVAL_SECONDS_DEFAULT = 3.0
# JOBS_FAULT_INJECTION in every service process: 5 %. The services run statements only while PostgreSQL
# is up, which the pace of its crashes leaves it for about a third of a run on a busy machine: at 2 %, a
# 30-minute run brought about 290 of each kind, short of the 500 aimed at.
STATEMENT_FAULTS_DEFAULT = 0.05
LEASE_SECONDS_DEFAULT = 2.5
# The longest the run waits, once the faults stop, for every job to end or wait visibly.
SETTLE_SECONDS_DEFAULT = 240.0
# How long past its bound (lease plus a heartbeat) a cancelled handler may still run before the checker
# calls the cancel ignored: room for a busy machine's scheduling, never for a worker that did not look.
CANCEL_SLACK_SECONDS_DEFAULT = 10.0
TENANTS = ("acme", "globex", "initech")


class FaultKind(enum.StrEnum):
    WORKER_KILL = "worker_kill"
    API_KILL = "api_kill"
    WORKER_PAUSE = "worker_pause"
    API_PAUSE = "api_pause"
    # A worker stopped for longer than its lease: its clock of lease deadlines jumps past them.
    LEASE_PAUSE = "lease_pause"
    POSTGRES_CRASH = "postgres_crash"
    CONNECTIONS_CUT = "connections_cut"
    CONNECTIONS_DELAYED = "connections_delayed"


# Counted from the services' logs: JOBS_FAULT_INJECTION's two kinds (shared/storage/fault_injection.py).
STATEMENT_FAULT_KINDS = ("statement_not_sent", "commit_reply_lost")


@dataclass(frozen=True)
class ChaosConfig:
    seconds: float = SECONDS_DEFAULT
    seed: int = 0
    workdir: Path = REPO_ROOT / ".chaos" / "run"
    fault_interval_seconds: float = FAULT_INTERVAL_SECONDS_DEFAULT
    faults: frozenset[FaultKind] = frozenset(FaultKind)
    statement_faults: float = STATEMENT_FAULTS_DEFAULT
    lease_seconds: float = LEASE_SECONDS_DEFAULT
    settle_seconds: float = SETTLE_SECONDS_DEFAULT
    cancel_slack_seconds: float = CANCEL_SLACK_SECONDS_DEFAULT
    tenants: tuple[str, ...] = TENANTS
    api_replicas: int = 2
    workers: int = 3
    worker_concurrency: int = 6
    clients_per_tenant: int = 2
    # Limits set before the workload starts; the checker replays the history against them.
    limits: Mapping[str, int] = field(default_factory=lambda: {"kind:chaos.limited": 2, "tenant:initech": 3})
    # How each service process starts: `python <argv>`. A test swaps one for a launcher that breaks a
    # guarantee on purpose, to show that the checker names the violation.
    api_argv: tuple[str, ...] = ("-m", "api_service")
    worker_argv: tuple[str, ...] = ("-m", "worker_service")
    python: str = sys.executable

    @property
    def heartbeat_seconds(self) -> float:
        return self.lease_seconds / 3

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ChaosConfig:
        """CHAOS_SECONDS, CHAOS_SEED (random when unset; printed, so any run can be replayed), CHAOS_DIR,
        CHAOS_FAULT_INTERVAL, CHAOS_STATEMENT_FAULTS, CHAOS_LEASE_SECONDS, CHAOS_SETTLE_SECONDS."""
        seed = env_int(env, "CHAOS_SEED", secrets.randbelow(2**31))
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        workdir = env_optional(env, "CHAOS_DIR")
        return cls(
            seconds=env_float(env, "CHAOS_SECONDS", SECONDS_DEFAULT, minimum=1.0),
            seed=seed,
            workdir=Path(workdir) if workdir else REPO_ROOT / ".chaos" / f"{stamp}-seed{seed}",
            fault_interval_seconds=env_float(env, "CHAOS_FAULT_INTERVAL", FAULT_INTERVAL_SECONDS_DEFAULT, minimum=0.1),
            statement_faults=env_float(env, "CHAOS_STATEMENT_FAULTS", STATEMENT_FAULTS_DEFAULT),
            lease_seconds=env_float(env, "CHAOS_LEASE_SECONDS", LEASE_SECONDS_DEFAULT, minimum=1.0),
            settle_seconds=env_float(env, "CHAOS_SETTLE_SECONDS", SETTLE_SECONDS_DEFAULT, minimum=10.0),
        )
