"""The lifecycle domain: S3 lifecycle rules and Iceberg maintenance per archive (its modules: docs/architecture.md)."""
