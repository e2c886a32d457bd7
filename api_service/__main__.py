"""`python -m api_service` serves; `python -m api_service migrate` applies the schema migrations;
`python -m api_service retire-kind KIND` retires a job kind that no worker runs any more."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import os
import sys
from collections.abc import Mapping

from prometheus_client import disable_created_metrics

from api_service.server import serve
from api_service.settings import ApiSettings
from api_service.usecases.admin_config import AdminConfig
from shared import event_loop
from shared.domain.admin import Actor
from shared.domain.errors import InvalidArgument, JobsError
from shared.env_settings import LOG_LEVEL_DEFAULT, SettingsError, env_log_level
from shared.garbage_collection import pace_garbage_collector
from shared.json_logging import configure_logging
from shared.storage.database import Database, PoolSettings
from shared.storage.database_settings import DatabaseSettings
from shared.storage.migrator import migrate

log = logging.getLogger("api_service")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m api_service", description=__doc__)
    parser.add_argument("command", nargs="?", choices=["serve", "migrate", "retire-kind"], default="serve")
    parser.add_argument("kind", nargs="?", help="with retire-kind: the job kind to retire")
    args = parser.parse_args(argv)
    if args.command == "retire-kind" and not args.kind:
        parser.error("retire-kind needs the KIND to retire")
    # Until the settings are read, so that an error in them is logged too.
    configure_logging(LOG_LEVEL_DEFAULT, "api_service")
    disable_created_metrics()
    try:
        if args.command == "migrate":
            # The migration Job has only the database settings and the log level, not the service's.
            configure_logging(env_log_level(os.environ), "api_service")
            applied = migrate(_migration_url(os.environ))
            log.info("migrations applied: %s", applied.labels() or "none needed")
            return 0
        if args.command == "retire-kind":
            configure_logging(env_log_level(os.environ), "api_service")
            return asyncio.run(_retire_kind(DatabaseSettings.from_env(os.environ), args.kind))
        settings = ApiSettings.from_env(os.environ)
        configure_logging(settings.log_level, "api_service")
        pace_garbage_collector()
        event_loop.run(serve(settings), os.environ)
        return 0
    except SettingsError as exc:
        log.error("configuration error: %s", exc)
        return 2
    except JobsError as exc:
        log.error("%s", exc.message)
        return 1


def _migration_url(env: Mapping[str, str]) -> str:
    """The migrations hold a session-level lock across many transactions: a transaction pooler would
    run the unlock on another server session, so they go to DATABASE_DIRECT_URL when there is one."""
    database = DatabaseSettings.from_env(env)
    if database.session_url is None:
        raise SettingsError("JOBS_DB_POOLING=transaction: migrate needs DATABASE_DIRECT_URL")
    return database.session_url


async def _retire_kind(database: DatabaseSettings, kind: str) -> int:
    """Through the AdminService's own use-case, so the retirement is in admin_actions like any other."""
    db = await Database.open(
        PoolSettings(
            database.url, max_size=1, application_name="jobs-admin", prepare_threshold=database.prepare_threshold
        )
    )
    try:
        await AdminConfig(db).retire_kind(
            Actor(f"operator:{getpass.getuser()}"), kind, "python -m api_service retire-kind"
        )
    except InvalidArgument:
        log.error("no known job kind %r (unknown, or retired already)", kind)
        return 1
    finally:
        await db.close()
    log.info("job kind %s retired: submissions of it are refused until a worker publishes it again", kind)
    return 0


if __name__ == "__main__":
    sys.exit(main())
