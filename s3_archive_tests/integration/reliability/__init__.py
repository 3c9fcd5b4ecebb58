"""The reliability tier: archive and restore through the S3 fault proxy (s3_archive/local/fault_proxy.py)."""
