#!/usr/bin/env bash
# `make test`: the suite in two pytest processes side by side. The tests that start Spark JVMs
# (in the test process or in the node processes they start) run in one, one after the other:
# two Spark JVMs at once on a 2-core machine would each run at half speed. Everything else
# (stores, elections, channels, placement, store failover, the CLI) runs in the other. Each
# starts its own Redis and PostgreSQL. The Spark run's output follows the other's; the exit
# status fails if either failed. Arguments go to both pytest runs.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin

SPARK=(
  tests/cascade
  tests/spark_deploy
  tests/chaos/test_campaign.py
  tests/test_quickstart.py
  tests/placement/test_cli_placement.py
  tests/placement/test_runner_races.py
  tests/unit/test_spark_where.py
)
ignore=()
for path in "${SPARK[@]}"; do ignore+=("--ignore=$path"); done

began=$(date +%s)
spark_log=$(mktemp -t baton-spark-tests.XXXXXX)
trap 'rm -f "$spark_log"' EXIT
"$BIN/pytest" -q -p no:cacheprovider "$@" "${SPARK[@]}" >"$spark_log" 2>&1 &
spark_pid=$!
echo "== the tests without Spark (the Spark tests run beside them; their output follows)"
"$BIN/pytest" -q -p no:cacheprovider "$@" "${ignore[@]}"
rest=$?
wait "$spark_pid"
spark=$?
echo "== the Spark tests"
cat "$spark_log"
echo "make test: $(( $(date +%s) - began )) s (without Spark: exit $rest; Spark: exit $spark)"
[ "$rest" -eq 0 ] && [ "$spark" -eq 0 ]
