"""Kinds every deployment has, for trying the service and for smoke tests in production."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter

from durable_jobs.handlers import (
    HandlerRegistry,
    JobContext,
    OutcomeUnknownError,
    PermanentError,
    RetryableError,
)
from shared.domain.kinds import KindPolicy

SLEEP_SECONDS_LIMIT = 24 * 3600
SUMMARY_SENTENCES = 3
_FLAKY_ERRORS = {"retryable": RetryableError, "permanent": PermanentError, "unknown": OutcomeUnknownError}
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?", re.UNICODE)
_STOPWORDS = frozenset(
    "a an and are as at be but by for from has have he her his i in is it its of on or our she so "
    "that the their them they this to was we were will with you your not no do does did".split()
)


def builtin_policies() -> list[KindPolicy]:
    """The built-in kinds' policies, which the API knows before any worker publishes them."""
    registry = HandlerRegistry()
    register_builtin_kinds(registry)
    return [spec.policy for spec in registry.specs()]


def register_builtin_kinds(registry: HandlerRegistry) -> None:
    registry.register("echo")(echo)
    registry.register("sleep")(sleep)
    registry.register("flaky", max_attempts=5)(flaky)
    registry.register("summarize")(summarize)


async def echo(ctx: JobContext) -> bytes:
    return ctx.payload


async def sleep(ctx: JobContext) -> bytes:
    """Waits; a cancel reaches it as CancelledError, so it stops at once."""
    seconds = _json_object(ctx.payload).get("seconds")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not 0 <= seconds <= SLEEP_SECONDS_LIMIT:
        raise PermanentError(f"'seconds' must be a number from 0 to {SLEEP_SECONDS_LIMIT}")
    await asyncio.sleep(seconds)
    return ctx.payload


async def flaky(ctx: JobContext) -> bytes:
    """Fails its first `fail_times` attempts with the given category, then succeeds."""
    spec = _json_object(ctx.payload)
    fail_times = spec.get("fail_times", 1)
    category = spec.get("category", "retryable")
    if not isinstance(fail_times, int) or isinstance(fail_times, bool) or fail_times < 0:
        raise PermanentError("'fail_times' must be a non-negative integer")
    if category not in _FLAKY_ERRORS:
        raise PermanentError("'category' must be one of retryable, permanent, unknown")
    if ctx.attempt <= fail_times:
        raise _FLAKY_ERRORS[category](f"flaky: attempt {ctx.attempt} of {fail_times} planned failures")
    return ctx.payload


async def summarize(ctx: JobContext) -> bytes:
    try:
        text = ctx.payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PermanentError("payload must be UTF-8 text") from exc
    return extractive_summary(text).encode("utf-8")


def extractive_summary(text: str, sentences: int = SUMMARY_SENTENCES) -> str:
    """The highest-scoring sentences by content-word frequency, in their original order."""
    candidates = [s.strip() for s in _SENTENCE_END.split(" ".join(text.split())) if s.strip()]
    if len(candidates) <= sentences:
        return " ".join(candidates)
    frequency = Counter(w for w in _words(text) if w not in _STOPWORDS)

    def score(sentence: str) -> float:
        words = [w for w in _words(sentence) if w not in _STOPWORDS]
        root_length: float = (len(words) or 1) ** 0.5
        return sum(frequency[w] for w in words) / root_length

    ranked = sorted(range(len(candidates)), key=lambda i: (-score(candidates[i]), i))[:sentences]
    return " ".join(candidates[i] for i in sorted(ranked))


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _json_object(payload: bytes) -> dict[str, object]:
    try:
        value = json.loads(payload or b"{}")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PermanentError("payload must be a JSON object") from exc
    if not isinstance(value, dict):
        raise PermanentError("payload must be a JSON object")
    return value
