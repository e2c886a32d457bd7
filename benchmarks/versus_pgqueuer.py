"""The work-down beside PgQueuer, two ways, in rounds whose runs are seconds apart: on a shared machine
only ratios measured side by side mean anything.

- The harness's way: our workers at 1,000 per replica with completions gathered for 5 ms up to 1,000,
  SubmitJobs of 1,000, against PgQueuer drained by five queue managers.
- As users run them: our workers' defaults at 100 per replica (and at 1,000), SubmitJobs of 500,
  against PgQueuer drained by one queue manager, as one process runs it.

PgQueuer's batch is 100 in both. Each round runs PgQueuer (five managers), the harness's work-down,
PgQueuer (one manager), then ours at each users' concurrency; every other round in the reverse order,
so neither side always runs first. Every run also says where its time went (scenarios.work_down,
benchmarks/pgqueuer_peer.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks import scenarios
from benchmarks.harness import fresh_database, median, pgqueuer_peer

# The peer the work-down is compared with (benchmarks/pgqueuer-requirements.txt pins it).
PEER_VERSION = "1.6.0"
PEER_BATCH = 100
HARNESS_DEQUEUERS = 5
USERS_DEQUEUERS = 1
USERS_CONCURRENCIES = (100, 1000)
# Each comparison: the figures' prefix, our run's label, the peer run's label.
_HARNESS = ("workdown", "harness", "pgqueuer")
_USERS = tuple((f"workdown_c{c}", f"c{c}", "pgqueuer_one_manager") for c in USERS_CONCURRENCIES)
_PEER_FIELDS = (
    "enqueue_per_s",
    "drain_per_s",
    "combined_per_s",
    "enqueue_python_cpu_us",
    "enqueue_postgres_cpu_us",
    "drain_python_cpu_us",
    "drain_postgres_cpu_us",
    "picked_to_done_ms",
)


def _runs(jobs: int, in_flight: int) -> list[tuple[str, Callable[[], dict[str, float]]]]:
    def peer(dequeuers: int) -> Callable[[], dict[str, float]]:
        def run() -> dict[str, float]:
            with fresh_database("pgqueuer", migrated=False) as url:
                return pgqueuer_peer(url, jobs, batch=PEER_BATCH, dequeuers=dequeuers, producers=in_flight)

        return run

    def ours(shape: scenarios.WorkDownShape) -> Callable[[], dict[str, float]]:
        def run() -> dict[str, float]:
            with fresh_database("workdown") as url:
                return scenarios.work_down(url, jobs, in_flight, shape)

        return run

    return [
        ("pgqueuer", peer(HARNESS_DEQUEUERS)),
        ("harness", ours(scenarios.HARNESS_SHAPE)),
        ("pgqueuer_one_manager", peer(USERS_DEQUEUERS)),
        *((f"c{c}", ours(scenarios.users_shape(c))) for c in USERS_CONCURRENCIES),
    ]


def beside_pgqueuer(jobs: int, repeat: int, in_flight: int) -> dict[str, Any]:
    """Every run `repeat` times, interleaved; medians of each figure and of each pair's ratio."""
    results: dict[str, list[dict[str, float]]] = {}
    runs = _runs(jobs, in_flight)
    for round_number in range(repeat):
        for label, run in runs if round_number % 2 == 0 else runs[::-1]:
            results.setdefault(label, []).append(run())
    figures: dict[str, Any] = {}
    for peer in ("pgqueuer", "pgqueuer_one_manager"):
        figures.update({f"{peer}_{k}": median([r[k] for r in results[peer]]) for k in _PEER_FIELDS})
    for prefix, label, peer in (_HARNESS, *_USERS):
        ours = results[label]
        ratios = [
            mine["jobs_per_s"] / theirs["combined_per_s"] for mine, theirs in zip(ours, results[peer], strict=True)
        ]
        figures.update({f"{prefix}_{k}": median([r[k] for r in ours]) for k in ours[0]})
        figures[f"{prefix}_vs_{peer}"] = median(ratios)
        figures[f"{prefix}_vs_{peer}_runs"] = [round(r, 3) for r in ratios]
    return figures


# The goal each comparison is held to.
TARGETS = {"workdown": 1.0, "workdown_c100": 1.0, "workdown_c1000": 1.3}


def rows(figures: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The table's rows: each peer, each work-down and its ratio to its peer, where each side's time went."""
    table = [
        _peer_row(figures, "pgqueuer", f"{HARNESS_DEQUEUERS} managers"),
        *_ours_rows(figures, _HARNESS, "the harness's way: 1,000 per replica, completions of up to 1,000"),
        _where_ours(figures, "workdown"),
        _where_peer(figures, "pgqueuer"),
        _peer_row(figures, "pgqueuer_one_manager", f"{USERS_DEQUEUERS} manager"),
    ]
    for concurrency, comparison in zip(USERS_CONCURRENCIES, _USERS, strict=True):
        table += [
            *_ours_rows(figures, comparison, f"as users run it: {concurrency:,} per replica, the workers' defaults"),
            _where_ours(figures, comparison[0]),
        ]
    table.append(_where_peer(figures, "pgqueuer_one_manager"))
    return table


def _peer_row(figures: dict[str, Any], peer: str, managers: str) -> tuple[str, str, str]:
    return (
        f"PgQueuer {PEER_VERSION}, {managers}",
        f"{figures[f'{peer}_combined_per_s']:,.0f} jobs/s",
        f"batch {PEER_BATCH}: enqueue {figures[f'{peer}_enqueue_per_s']:,.0f}/s,"
        f" drain {figures[f'{peer}_drain_per_s']:,.0f}/s, harmonic combination",
    )


def _ours_rows(figures: dict[str, Any], comparison: tuple[str, str, str], how: str) -> list[tuple[str, str, str]]:
    prefix, label, peer = comparison
    ratio = f"{prefix}_vs_{peer}"
    submit_batch = scenarios.HARNESS_SHAPE.submit_batch if label == "harness" else scenarios.USERS_SUBMIT_BATCH
    return [
        (
            "work-down through the API" if label == "harness" else f"  work-down at {label[1:]} per replica",
            f"{figures[f'{prefix}_jobs_per_s']:,.0f} jobs/s",
            f"{how}, SubmitJobs of {submit_batch:,}",
        ),
        (
            f"    against {peer}",
            f"{figures[ratio]:.2f}x",
            f"target >= {TARGETS[prefix]:.2f}x; the median of the pairs "
            + ", ".join(f"{r:.2f}x" for r in figures[f"{ratio}_runs"]),
        ),
    ]


def _where_ours(figures: dict[str, Any], prefix: str) -> tuple[str, str, str]:
    f = {k.removeprefix(f"{prefix}_"): v for k, v in figures.items() if k.startswith(f"{prefix}_")}
    return (
        "  where its time goes",
        f"{f['api_cpu_us']:.0f} + {f['workers_cpu_us']:.0f} + {f['postgres_cpu_us']:.0f} us/job",
        f"CPU of the API, both workers, PostgreSQL's sessions; a lease held {f['held_mean_ms']:.1f} ms"
        f" (p50 {f['held_p50_ms']:.1f}), {f['leases_held_mean']:.0f} held of {f['slots']:.0f} slots;"
        f" a job waited {f['wait_mean_ms']:.0f} ms to start; submitting took {f['submit_share']:.0%} of the run",
    )


def _where_peer(figures: dict[str, Any], peer: str) -> tuple[str, str, str]:
    f = {k.removeprefix(f"{peer}_"): v for k, v in figures.items() if k.startswith(f"{peer}_")}
    return (
        f"  where {peer}'s time goes",
        f"{f['drain_python_cpu_us']:.0f} + {f['drain_postgres_cpu_us']:.0f} us/job",
        f"drain: CPU of its process, PostgreSQL's sessions (enqueue {f['enqueue_python_cpu_us']:.0f} +"
        f" {f['enqueue_postgres_cpu_us']:.0f}); pick to logged success {f['picked_to_done_ms']:.1f} ms",
    )
