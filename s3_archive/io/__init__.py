"""How the product reaches Kafka, Spark and S3 (its modules: docs/architecture.md)."""
