"""The archive's driver side: a run's windows, its one Spark job, the commit (its modules: docs/architecture.md)."""
