#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: system packages (only when missing), then the venv.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
[ -x /usr/lib/postgresql/15/bin/initdb ] || need+=(postgresql)
# nftables: the partition tests (a controller cut off from one node) drop packets with it.
command -v nft >/dev/null 2>&1 || need+=(nftables)
# faketime: the fault campaign jumps one elect candidate's clock (libfaketime, LD_PRELOAD).
command -v faketime >/dev/null 2>&1 || need+=(faketime)
# sqlite3: the quickstart (and its test) creates tables with the SQLite shell.
command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
# Java for Spark (the data pipeline runs on PySpark, which starts a JVM).
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
# etcd: the conformance suite runs the etcd store against a real server (and the benchmarks
# compare baton with etcd's own election API).
command -v etcd >/dev/null 2>&1 || need+=(etcd-server etcd-client)
# promtool (from prometheus): the dashboard test checks docs/alerts.yml with `promtool check rules`.
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
# chromium: the web dashboard's tests drive Debian's browser with Playwright.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ "${BATON_BENCH:-0}" = 1 ]; then
  # The store-failover benchmark's reference: Redis Sentinel.
  command -v redis-sentinel >/dev/null 2>&1 || need+=(redis-sentinel)
  # The cascade benchmark's references: Londiste 3 + PgQ, and a plain Spark JDBC write.
  command -v londiste >/dev/null 2>&1 || need+=(python3-londiste postgresql-15-londiste-sql)
  command -v pgqd >/dev/null 2>&1 || need+=(pgqd)
  [ -f /usr/share/postgresql/15/extension/pgq.control ] || need+=(postgresql-15-pgq3)
  [ -f /usr/share/postgresql/15/extension/pgq_node.control ] || need+=(postgresql-15-pgq-node)
  [ -f /usr/share/java/postgresql.jar ] || need+=(libpostgresql-jdbc-java)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing system packages: ${need[*]}; run as root or install them with apt-get" >&2
    exit 1
  fi
  echo "setup: installing ${need[*]} with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  # Debian starts the packaged servers; baton starts its own on free ports, so stop those.
  (service redis-server stop || true) >/dev/null 2>&1
  (service redis-sentinel stop || true) >/dev/null 2>&1
  (service postgresql stop || true) >/dev/null 2>&1
  (service etcd stop || true) >/dev/null 2>&1
  (service prometheus stop || true) >/dev/null 2>&1
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/pip install -q --disable-pip-version-check -e ".[dev]" 2>&1 | grep -v "is ignored: it is neither" || true
  # grpc, zstandard: the Spark Connect client (the connect extra), for the spark_deploy tests.
  .venv/bin/python -c "import baton, redis, psycopg, pyspark, pyarrow, grpc, zstandard"
  touch "$stamp"
fi
# The Spark driver's class archive (baton.spark.class_archive): JVMs of the tests and the demo
# start in about half the time. Built once per venv; without it Spark only starts slower.
archive=.venv/spark-classes.jsa
if [ ! -f "$archive" ] || [ "$stamp" -nt "$archive" ]; then
  echo "setup: building the Spark class archive (once)"
  .venv/bin/python -m baton.spark.class_archive "$archive" || true
fi
if [ "${BATON_BENCH:-0}" = 1 ] && ! .venv/bin/python -c "import matplotlib, reladiff" 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check -e ".[dev,bench]" 2>&1 | grep -v "is ignored: it is neither" || true
fi
