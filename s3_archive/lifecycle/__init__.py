"""S3 lifecycle rules of each archive, reconciled with the bucket's configuration.

    rules.py      the archive's rules (pure), the diff against the bucket's, and when an object may have expired
    reconcile.py  the I/O: read the bucket's rules, write ours back with every foreign rule unchanged
"""
