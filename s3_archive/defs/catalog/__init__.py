"""The catalog domain: one Glue table per archived topic, kept current as windows land (s3_archive/catalog/)."""

from s3_archive.defs.catalog.assets import build_catalog_defs, catalog_asset_key

__all__ = ["build_catalog_defs", "catalog_asset_key"]
