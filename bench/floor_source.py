"""The smallest Python streaming source and sink, to measure the fixed cost of a micro-batch in
this Spark (:mod:`bench.hops`): ``batonfloor`` has one new row at every trigger; the
``batonfloornull`` sink takes its rows and does nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class _Reader(DataSourceStreamReader):
    def initialOffset(self) -> dict[str, int]:
        return {"n": 0}

    def latestOffset(self, start: dict[str, int], limit: Any = None) -> dict[str, int]:
        return {"n": int(start["n"]) + 1}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition(int(end["n"]))]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        yield (int(partition.value),)

    def commit(self, end: dict[str, int]) -> None:
        pass


class FloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "batonfloor"

    def schema(self) -> str:
        return "n long"

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _Reader()


class _Writer(DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


class NullSink(DataSource):
    @classmethod
    def name(cls) -> str:
        return "batonfloornull"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return _Writer()


def register(spark: SparkSession) -> None:
    spark.dataSource.register(FloorSource)
    spark.dataSource.register(NullSink)
