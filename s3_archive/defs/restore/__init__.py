"""The restore domain: one asset per archived topic, partitioned by its windows (its modules: docs/architecture.md)."""
