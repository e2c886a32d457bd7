"""A multi-stage document pipeline that resumes where it stopped: upload check, text extraction,
embeddings, index publication. Each stage writes its output durably first and checkpoints after, so an
attempt that fails (or whose worker dies) in stage 3 is retried from stage 3.

The "object store" here is a directory named by the payload; in production it is S3, GCS or a
database, and the rule is the same: the checkpoint names an output that is already stored."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from durable_jobs import JobContext, JobKinds, PermanentError

kinds = JobKinds()
EMBEDDING_DIMENSIONS = 8


@dataclass
class Document:
    upload: str  # the uploaded file
    store: str  # where stage outputs are kept


@kinds.kind("example.document", max_attempts=5, payload=Document)
def process_document(ctx: JobContext, request: Document) -> bytes:
    """A plain def: file work and hashing run in the worker's thread pool, off its event loop."""
    outputs = Path(request.store) / ctx.job_id
    outputs.mkdir(parents=True, exist_ok=True)
    stages = (
        ("upload_check", lambda: _check_upload(Path(request.upload))),
        ("extract_text", lambda: _extract_text(Path(request.upload), outputs)),
        ("embeddings", lambda: _embed(outputs)),
        ("publish_index", lambda: _publish(outputs)),
    )
    for number, (stage, run) in enumerate(stages, start=1):
        if ctx.completed_stage(stage) is None:
            # Only once run() returned is the stage's output durable; then, and only then, checkpoint.
            ctx.checkpoint_blocking(stage, run())
        ctx.report_progress(number / len(stages), stage)
    return json.dumps({stage: ctx.checkpoints[stage].json() for stage, _ in stages}).encode()


def _check_upload(upload: Path) -> dict[str, object]:
    if not upload.is_file():
        raise PermanentError(f"upload: no file at {upload}")
    data = upload.read_bytes()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _extract_text(upload: Path, outputs: Path) -> dict[str, object]:
    text = upload.read_bytes().decode("utf-8", errors="replace")
    path = _write_durably(outputs / "text.txt", text.encode())
    return {"text": str(path)}


def _embed(outputs: Path) -> dict[str, object]:
    paragraphs = [p for p in (outputs / "text.txt").read_text().split("\n\n") if p.strip()]
    vectors = [list(hashlib.sha256(p.encode()).digest()[:EMBEDDING_DIMENSIONS]) for p in paragraphs]
    path = _write_durably(outputs / "embeddings.json", json.dumps(vectors).encode())
    return {"embeddings": str(path), "count": len(vectors)}


def _publish(outputs: Path) -> dict[str, object]:
    entry = {"text": str(outputs / "text.txt"), "embeddings": str(outputs / "embeddings.json")}
    path = _write_durably(outputs / "index.json", json.dumps(entry).encode())
    return {"index": str(path)}


def _write_durably(path: Path, data: bytes) -> Path:
    """Written in full or not at all, and on disk before the stage is checkpointed."""
    partial = path.with_suffix(path.suffix + ".partial")
    with partial.open("wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)
    return path
