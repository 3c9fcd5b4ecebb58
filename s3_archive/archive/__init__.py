"""The archive stage: Kafka offset windows planned, written to S3 and committed (its modules: docs/architecture.md)."""
