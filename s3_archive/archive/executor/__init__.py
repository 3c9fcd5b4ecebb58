"""The archive's executor side: the write tasks, free of Spark and Dagster (its modules: docs/architecture.md)."""
