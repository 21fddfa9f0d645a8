"""One SparkSession for the whole test run (one JVM at a time on this machine), quiet and with
its scratch directories in the run's temp dir."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from baton.spark.session import build_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    session = build_session(
        master="local[2]", work_dir=tmp_path_factory.mktemp("spark"), quiet=True
    )
    yield session
    session.stop()
