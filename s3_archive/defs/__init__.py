"""Dagster's side: a folder per domain wiring the stages to Dagster (its modules: docs/architecture.md)."""
