# The two commands of the README: `make demo` and `make test`. Both set everything up first.
.PHONY: setup demo test test-unit test-integration test-e2e down

setup:
	@scripts/setup

demo: setup
	.venv/bin/s3-archive demo

test: setup
	.venv/bin/python -m pytest

test-unit: setup
	.venv/bin/python -m pytest -m unit

test-integration: setup
	.venv/bin/python -m pytest -m integration

test-e2e: setup
	.venv/bin/python -m pytest -m e2e

down:
	.venv/bin/s3-archive local down
