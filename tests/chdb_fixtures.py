"""Embedded ClickHouse fixtures for the test packages that store rows: one engine per package, a database per test.

chdb opens one data directory per process at a time, so each package uses one directory and closes its client
when the package is done; tests stay apart through a fresh, migrated database each. A package's conftest
imports these names to register them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.clickhouse import connect
from ingest.migrate import Target, migrate


@pytest.fixture(scope="package")
def ch_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one chdb directory this package uses (chdb allows one path per process at a time)."""
    return tmp_path_factory.mktemp("ch")


@pytest.fixture(scope="package")
def ch(ch_path: Path) -> Iterator[Any]:
    """A client on the embedded engine, closed when the package is done so other packages can open theirs."""
    client = connect(f"chdb://{ch_path}")
    yield client
    client.close()


@pytest.fixture
def db(ch: Any) -> str:
    """A fresh database with the schema applied; its name."""
    name = "t_" + uuid.uuid4().hex[:12]
    migrate(ch, Target(database=name))
    return name
