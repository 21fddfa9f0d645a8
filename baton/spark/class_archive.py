"""A class-data archive for the Spark driver's JVM: start-up in about half the time.

A JVM started with ``-XX:SharedArchiveFile=FILE`` maps the classes it would otherwise load,
verify and link one by one (Spark loads some twenty thousand) from ``FILE``. On a 2-core
machine that halves the time to a session's first query (measured: docs/benchmarks.md), and a
test suite or a demo starts dozens of JVMs.

``BATON_SPARK_CLASS_ARCHIVE=FILE`` makes every *quiet* local session (tests, the demo, the
node runners; see :mod:`baton.spark.session`) start from the archive when ``FILE`` exists.
Build it on the machine that uses it, with this interpreter's PySpark::

    python -m baton.spark.class_archive .venv/spark-classes.jsa

It is built by a JVM that exits cleanly after a small job, into a temporary file renamed into
place only when that JVM succeeded: a half-written archive would crash every JVM that maps it,
while a merely stale one (PySpark upgraded since) is only ignored by the JVM. Never ship or
commit one: it belongs to the JDK and the jars it was built with.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: The environment variable naming the archive quiet local sessions start from.
ENV_ARCHIVE = "BATON_SPARK_CLASS_ARCHIVE"
#: The JVM's own lines about the archive (a stale one is ignored with a warning) stay off
#: baton's terminals.
QUIET_LOG = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def java_options() -> str:
    """The driver JVM's options for the archive: empty unless ``BATON_SPARK_CLASS_ARCHIVE``
    names a file that exists."""
    path = os.environ.get(ENV_ARCHIVE, "")
    if not path or not Path(path).is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET_LOG}"


#: The job the archiving JVM runs: a session, a query with a shuffle, a Python UDF and an
#: Arrow conversion, so the classes every baton session uses are in the archive.
_JOB = """
import sys
from pathlib import Path
from baton.spark.session import build_session
work = Path(sys.argv[1])
spark = build_session(master="local[2]", work_dir=work, quiet=True, conf={
    "spark.driver.extraJavaOptions": (
        f"-Djava.io.tmpdir={work} -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "
        f"-XX:ArchiveClassesAtExit={sys.argv[2]}"
    ),
})
df = spark.range(1000).selectExpr("id % 7 as k", "id").groupBy("k").count()
assert len(df.toPandas()) == 7
spark.createDataFrame([(1, "a")], "x int, y string").selectExpr("upper(y)").collect()
spark.stop()
"""


def build(path: Path) -> None:
    """Build the archive at ``path`` (replacing an older one only once the new one is whole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Built beside its final place, so the rename is one step on one filesystem.
    with tempfile.TemporaryDirectory(prefix=".baton-cds-", dir=path.parent) as tmp:
        partial = Path(tmp) / "classes.jsa"
        env = {k: v for k, v in os.environ.items() if k != ENV_ARCHIVE}
        done = subprocess.run(
            [sys.executable, "-c", _JOB, str(Path(tmp) / "work"), str(partial)],
            env=env,
            check=False,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
            tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
            raise SystemExit(f"class archive not built ({tail[0]}); Spark starts without one")
        partial.replace(path)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python -m baton.spark.class_archive FILE")
    build(Path(args[0]))
    print(f"class archive: {args[0]}")


if __name__ == "__main__":
    main()
