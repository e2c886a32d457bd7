"""`python -m api_service` serves; `python -m api_service migrate` applies the schema migrations;
`python -m api_service retire-kind KIND` retires a job kind that no worker runs any more."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import os
import sys

from prometheus_client import disable_created_metrics

from api_service.server import serve
from api_service.settings import ApiSettings
from shared.domain.errors import JobsError
from shared.env_settings import SettingsError, env_str
from shared.json_logging import configure_logging
from shared.storage import kind_store
from shared.storage.database import Database, PoolSettings
from shared.storage.migrator import migrate

log = logging.getLogger("api_service")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m api_service", description=__doc__)
    parser.add_argument("command", nargs="?", choices=["serve", "migrate", "retire-kind"], default="serve")
    parser.add_argument("kind", nargs="?", help="with retire-kind: the job kind to retire")
    args = parser.parse_args(argv)
    if args.command == "retire-kind" and not args.kind:
        parser.error("retire-kind needs the KIND to retire")
    configure_logging(os.environ.get("JOBS_LOG_LEVEL", "INFO").upper(), "api_service")
    disable_created_metrics()
    try:
        if args.command == "migrate":
            applied = migrate(env_str(os.environ, "DATABASE_URL"))
            log.info("migrations applied: %s", [f"{m.version:04d}_{m.name}" for m in applied] or "none needed")
            return 0
        if args.command == "retire-kind":
            return asyncio.run(_retire_kind(env_str(os.environ, "DATABASE_URL"), args.kind))
        asyncio.run(serve(ApiSettings.from_env(os.environ)))
        return 0
    except SettingsError as exc:
        log.error("configuration error: %s", exc)
        return 2
    except JobsError as exc:
        log.error("%s", exc.message)
        return 1


async def _retire_kind(database_url: str, kind: str) -> int:
    db = await Database.open(PoolSettings(database_url, max_size=1, application_name="jobs-admin"))
    try:
        async with db.transaction() as conn:
            retired = await kind_store.retire(conn, kind, actor=f"operator:{getpass.getuser()}")
    finally:
        await db.close()
    if not retired:
        log.error("no known job kind %r (unknown, or retired already)", kind)
        return 1
    log.info("job kind %s retired: submissions of it are refused until a worker publishes it again", kind)
    return 0


if __name__ == "__main__":
    sys.exit(main())
