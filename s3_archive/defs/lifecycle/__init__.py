"""The lifecycle domain: one asset per archive that reconciles its S3 lifecycle rules (s3_archive/lifecycle/), and
the maintenance of its Iceberg tables."""
