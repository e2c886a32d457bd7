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
from shared.env_settings import SettingsError, env_str
from shared.json_logging import configure_logging
from shared.storage.migrator import migrate

log = logging.getLogger("api_service")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m api_service", description=__doc__)
    parser.add_argument("command", nargs="?", choices=["serve", "migrate"], default="serve")
    args = parser.parse_args(argv)
    configure_logging(os.environ.get("JOBS_LOG_LEVEL", "INFO").upper(), "api_service")
    disable_created_metrics()
    try:
        if args.command == "migrate":
            applied = migrate(env_str(os.environ, "DATABASE_URL"))
            log.info("migrations applied: %s", [f"{m.version:04d}_{m.name}" for m in applied] or "none needed")
            return 0
        asyncio.run(serve(ApiSettings.from_env(os.environ)))
        return 0
    except SettingsError as exc:
        log.error("configuration error: %s", exc)
        return 2
    except JobsError as exc:
        log.error("%s", exc.message)
        return 1


if __name__ == "__main__":
    sys.exit(main())
