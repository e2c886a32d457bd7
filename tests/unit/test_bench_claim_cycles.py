"""The fairness figure counts a job's wait in claim cycles (benchmarks/fairness.py, Drain.claims_waited):
the claim that took it and every claim that saw it and passed it over, never a claim that raced the one
that took it."""

from __future__ import annotations

from benchmarks.fairness import Drain


def _drain(spans: list[tuple[float, float]], taken: dict[str, float]) -> Drain:
    drain = Drain("postgresql://unused")
    drain.claim_spans = spans
    drain.taken_at = taken
    return drain


def test_the_first_claim_to_see_a_job_taking_it_is_one_cycle():
    drain = _drain([(9.0, 10.5), (10.1, 10.4)], {"b": 10.1})

    assert drain.claims_waited({"b": 10.0}) == [1]


def test_claims_racing_the_one_that_took_it_are_not_cycles_it_waited():
    # Four claimers start together after the answer; one locks the job, three find it locked and end first.
    spans = [(10.10, 10.30), (10.11, 10.31), (10.12, 10.32), (10.13, 10.90)]

    assert _drain(spans, {"b": 10.13}).claims_waited({"b": 10.0}) == [1]


def test_each_claim_that_saw_the_job_and_ended_without_it_is_a_cycle():
    spans = [(10.1, 10.2), (10.3, 10.4), (10.5, 10.6)]

    assert _drain(spans, {"b": 10.5}).claims_waited({"b": 10.0}) == [3]


def test_a_claim_that_began_before_the_answer_took_it_in_no_cycle_and_untaken_jobs_are_left_out():
    drain = _drain([(9.9, 10.2)], {"b": 9.9})

    assert drain.claims_waited({"b": 10.0, "never-taken": 10.0}) == [0]
