# The two set-up commands of the README: `make demo` and `make test`. Both set up everything.
VENV := .venv
BIN := $(VENV)/bin
# Quiet local Spark sessions start from the class archive `make setup` builds (if it could).
export BATON_SPARK_CLASS_ARCHIVE := $(CURDIR)/$(VENV)/spark-classes.jsa

.PHONY: setup demo test lint unit bench chaos clean

setup:
	@./scripts/setup.sh

demo: setup
	@$(BIN)/baton demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The whole suite. (`pytest -m "not long"` leaves out the eight black-box runs of a minute or
# more, for a quicker loop while working; make test and CI always run everything.)
test: lint
	$(BIN)/pytest -q -p no:cacheprovider -n 2 --dist loadgroup

bench: setup
	@BATON_BENCH=1 ./scripts/setup.sh
	$(BIN)/python -m bench.run

# A fault campaign of 1,000 faults (needs root: network namespaces). SEED=n repeats a run.
SEED ?= 1
chaos: setup
	$(BIN)/python -m baton.chaos --seed $(SEED) --faults 1000 --per-round 12 --out chaos-run

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
