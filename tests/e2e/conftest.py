"""The e2e tier's engine fixtures live in ``tests/support/engine_fixtures`` (a plugin loaded by
``tests/conftest.py``), shared with the browser tests so one session starts one engine. The helpers are
re-exported here for the e2e modules that import them; the fixtures themselves must not be, or pytest
would register a second, separate session engine for this folder.
"""

from __future__ import annotations

from tests.support.engine_fixtures import (
    IN_FLIGHT_LIMIT,
    ROOT,
    STARTUP_TIMEOUT_S,
    Server,
    e2e_settings,
    free_port,
)

__all__ = ["IN_FLIGHT_LIMIT", "ROOT", "STARTUP_TIMEOUT_S", "Server", "e2e_settings", "free_port"]
