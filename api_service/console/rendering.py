"""Templates (Jinja2, every value escaped) and the small helpers they use; the queue chart's samples."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import jinja2
from aiohttp import web

from shared.domain.jobs import JobState
from shared.domain.limit_keys import WaitingReason, kind_key
from shared.domain.operator_views import Preview, QueueLine

CHART_SAMPLES_MAX = 90
CHART_SAMPLE_EVERY_SECONDS = 2.0
CHART_WIDTH = 600
CHART_HEIGHT = 80
# Bytes shown as hex when a payload is not UTF-8 text.
HEX_PREVIEW_BYTES = 512


def template_environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("api_service.console", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        when=when,
        ago=ago,
        seconds=seconds_text,
        preview=preview_text,
        count=count_text,
        short_id=short_job_id,
        kind_key=kind_key,
        waiting_text=waiting_text,
    )
    env.globals.update(state_names=[s.value for s in JobState])
    return env


def render(env: jinja2.Environment, name: str, http_status: int = 200, **context: Any) -> web.Response:
    body = env.get_template(name).render(**context)
    return web.Response(text=body, status=http_status, content_type="text/html", charset="utf-8")


def static_root() -> Any:
    return resources.files("api_service.console").joinpath("static")


def when(value: datetime | None) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if value else "—"


def ago(value: datetime | None) -> str:
    if value is None:
        return "—"
    return seconds_text((datetime.now(UTC) - value).total_seconds()) + " ago"


def seconds_text(value: float | None) -> str:
    if value is None:
        return "—"
    value = max(0.0, value)
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.0f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    if value < 172800:
        return f"{value / 3600:.1f} h"
    return f"{value / 86400:.1f} d"


def count_text(value: int) -> str:
    return f"{value:,}".replace(",", "\u202f") if value else "·"


def preview_text(preview: Preview) -> str:
    """UTF-8 text as it is; anything else as hex (the template escapes either)."""
    try:
        return preview.head.decode("utf-8")
    except UnicodeDecodeError:
        head = preview.head[:HEX_PREVIEW_BYTES]
        return " ".join(head[i : i + 16].hex(" ") for i in range(0, len(head), 16))


_WAITING_TEXT = {
    "kind_paused": "its kind is paused by an operator ({key})",
    "key_held": "a provider pushed back: {key} is held",
    "limit_running": "{key} runs its maximum number of jobs",
    "limit_rate": "{key} has spent its start rate for now",
    "sequence_waiting": "an earlier job of sequence {key} has not ended",
    "sequence_halted": "sequence {key} is halted: an earlier job failed; retry or cancel it",
}


def waiting_text(waiting: WaitingReason) -> str:
    """Why a due job is not started, in an operator's words (the reason code follows, for searching)."""
    text = _WAITING_TEXT.get(waiting.reason, "{key}").format(key=waiting.key)
    return f"{text} [{waiting.reason}]"


@dataclass(frozen=True)
class ChartSample:
    at: float
    waiting: int
    running: int


class QueueChart:
    """Totals over every kind and tenant, kept as the queue page reads them (at most one sample per
    period), so the chart costs no query of its own and no work while nobody looks."""

    def __init__(self) -> None:
        self._samples: deque[ChartSample] = deque(maxlen=CHART_SAMPLES_MAX)

    def record(self, lines: list[QueueLine]) -> None:
        now = time.monotonic()
        if self._samples and now - self._samples[-1].at < CHART_SAMPLE_EVERY_SECONDS:
            return
        self._samples.append(
            ChartSample(now, sum(line.pending + line.retry_wait for line in lines), sum(line.running for line in lines))
        )

    def polylines(self) -> dict[str, str]:
        """SVG points for each series, scaled to the chart's box (the newest sample at the right edge)."""
        samples = list(self._samples)
        top = max([1, *(max(s.waiting, s.running) for s in samples)])
        step = CHART_WIDTH / (CHART_SAMPLES_MAX - 1)
        offset = CHART_WIDTH - step * (len(samples) - 1)

        def points(values: list[int]) -> str:
            return " ".join(
                f"{offset + i * step:.1f},{CHART_HEIGHT - 4 - (v / top) * (CHART_HEIGHT - 8):.1f}"
                for i, v in enumerate(values)
            )

        return {
            "waiting": points([s.waiting for s in samples]),
            "running": points([s.running for s in samples]),
            "top": str(top),
        }


def short_job_id(job_id: str) -> str:
    """A job id short enough for a table: its last eight hex digits, which are random. The first ones
    are the creation time (version 7 ids), the same for every job made in the same minute."""
    return "…" + job_id[-8:]
