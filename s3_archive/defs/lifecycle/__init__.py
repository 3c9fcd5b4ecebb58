"""The lifecycle domain: one asset per archive that reconciles its S3 lifecycle rules (s3_archive/lifecycle/)."""

from s3_archive.defs.lifecycle.assets import build_lifecycle_defs, lifecycle_asset_key

__all__ = ["build_lifecycle_defs", "lifecycle_asset_key"]
