"""`python -m api_service` serves; `python -m api_service migrate` applies the schema migrations."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from prometheus_client import disable_created_metrics

from api_service.server import serve
from api_service.settings import ApiSettings
from shared.domain.errors import JobsError
from shared.env_settings import LOG_LEVEL_DEFAULT, SettingsError, env_log_level, env_str
from shared.json_logging import configure_logging
from shared.storage.migrator import migrate

log = logging.getLogger("api_service")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m api_service", description=__doc__)
    parser.add_argument("command", nargs="?", choices=["serve", "migrate"], default="serve")
    args = parser.parse_args(argv)
    # Until the settings are read, so that an error in them is logged too.
    configure_logging(LOG_LEVEL_DEFAULT, "api_service")
    disable_created_metrics()
    try:
        if args.command == "migrate":
            # The migration Job has only DATABASE_URL and the log level, not the service's settings.
            configure_logging(env_log_level(os.environ), "api_service")
            applied = migrate(env_str(os.environ, "DATABASE_URL"))
            log.info("migrations applied: %s", [f"{m.version:04d}_{m.name}" for m in applied] or "none needed")
            return 0
        settings = ApiSettings.from_env(os.environ)
        configure_logging(settings.log_level, "api_service")
        asyncio.run(serve(settings))
        return 0
    except SettingsError as exc:
        log.error("configuration error: %s", exc)
        return 2
    except JobsError as exc:
        log.error("%s", exc.message)
        return 1


if __name__ == "__main__":
    sys.exit(main())
