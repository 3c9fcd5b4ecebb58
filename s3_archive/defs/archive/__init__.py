"""The archive domain: one asset per topic, partitioned by offset windows (its modules: docs/architecture.md)."""
