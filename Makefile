# The two commands of the README: `make demo` and `make test`. Both set everything up first.
.PHONY: setup demo test test-unit test-integration test-e2e test-reliability down bench bench-final bench-reliability

setup:
	@scripts/setup

demo: setup
	.venv/bin/s3-archive demo

# On two pytest-xdist workers sharing one broker and one moto server (s3_archive_tests/workers.py).
test: setup
	.venv/bin/python -m pytest -n 2 --dist loadgroup

test-unit: setup
	.venv/bin/python -m pytest -m unit

test-integration: setup
	.venv/bin/python -m pytest -m integration

test-e2e: setup
	.venv/bin/python -m pytest -m e2e

# Archive and restore through the S3 fault proxy (docs/reliability.md); part of `make test` too.
test-reliability: setup
	.venv/bin/python -m pytest -m reliability

down:
	.venv/bin/s3-archive local down

# Benchmarks (bench/README.md): the page docs/benchmarks.md and its JSON in bench/results/; starts its own broker and
# moto; e.g. `make bench BENCH_ARGS="--mb 50 --repeats 1 --out /tmp/bench"` (a trial run: page and JSON in --out).
# Fetches the peers' jars (Kafka Connect + Iceberg sink, Flink) first: only the benchmark needs them.
bench: setup
	scripts/fetch-jars bench
	BENCH_FROM_MAKE=bench .venv/bin/python -m bench.run $(BENCH_ARGS)

# The figures of docs/benchmarks.md: 200 MB (3 rounds) and 1 GB (1 round) in one command, one page.
bench-final: setup
	scripts/fetch-jars bench
	BENCH_FROM_MAKE=bench-final .venv/bin/python -m bench.run --mb 200,1000 --repeats 3,1

# The seeded S3 fault matrix (docs/reliability.md), into bench/results/reliability.json: e.g.
# `make bench-reliability RELIABILITY_ARGS="--runs 20"`.
bench-reliability: setup
	.venv/bin/python -m bench.reliability $(RELIABILITY_ARGS)
