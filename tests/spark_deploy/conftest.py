"""Spark deployments started for these tests, one per module, torn down with everything they
started (executors, Python workers)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from baton.testing.spark_servers import ConnectServer, StandaloneCluster
from tests.spark_deploy.procs import Cascade


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A standalone master and two one-core workers."""
    with StandaloneCluster(tmp_path_factory.mktemp("standalone"), workers=2, cores=1) as c:
        yield c


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A Spark Connect server running Spark on local[2]."""
    with ConnectServer(tmp_path_factory.mktemp("connect"), master="local[2]") as server:
        yield server


@pytest.fixture
def cascade(tmp_path: Path) -> Iterator[Cascade]:
    c = Cascade(tmp_path)
    try:
        yield c
    finally:
        c.close()
