"""The restore stage: archived windows back into Kafka, exactly once (its modules: docs/architecture.md)."""
