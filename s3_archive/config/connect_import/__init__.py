"""`s3-archive import-connect`: a Kafka Connect S3 sink's config as an archive (its modules: docs/architecture.md)."""
