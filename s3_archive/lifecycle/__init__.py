"""S3 lifecycle rules of each archive, reconciled with the bucket's configuration.

    rules.py                  the archive's rules (pure) and the diff against the bucket's
    reconcile.py              the I/O: read the bucket's rules, write ours back with every foreign rule unchanged
    iceberg_maintenance.py    snapshot expiration and orphan files of `format: iceberg` tables (Iceberg's procedures)
"""
