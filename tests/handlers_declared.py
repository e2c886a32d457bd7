"""Job kinds declared at module level with typed payloads, loaded through JOBS_HANDLER_MODULES."""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.handlers import JobContext, JobKinds

kinds = JobKinds()


@dataclass
class Greeting:
    name: str
    times: int = 1
    tags: list[str] = field(default_factory=list)


@kinds.kind("greet", max_attempts=2, payload=Greeting)
async def greet(ctx: JobContext, greeting: Greeting) -> bytes:
    return (f"hello {greeting.name} " * greeting.times).strip().encode()


@kinds.kind("greet.process", executor="process", payload=Greeting)
def greet_in_a_process(ctx: JobContext, greeting: Greeting) -> bytes:
    return f"{greeting.name} from a child process".encode()
