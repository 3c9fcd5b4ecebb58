"""The lifecycle stage: S3 lifecycle rules, and Iceberg tables' maintenance (its modules: docs/architecture.md)."""
