import dagster as dg
import pytest

from s3_archive.config.settings import parse_settings
from s3_archive.definitions import build_defs
from s3_archive.defs.lifecycle.assets import build_lifecycle_assets

ICE = {"archives": [{"name": "ice", "topics": ["orders"], "bucket": "b-1", "format": "iceberg"},
                    {"name": "pq", "topics": ["pay"], "bucket": "b-1", "prefix": "pq/"}]}


def test_an_iceberg_archive_gets_a_maintenance_asset_and_no_glue_table_asset():
    keys = {k.to_user_string() for k in build_defs(parse_settings(ICE)).resolve_asset_graph().get_all_asset_keys()}
    assert "iceberg_maintenance/ice" in keys and "iceberg_maintenance/pq" not in keys
    assert not any(k.startswith("kafka_catalog/") and "orders" in k for k in keys)
    assert "kafka_archive/orders" in keys


def test_a_lifecycle_policy_that_expires_under_an_iceberg_table_is_refused():
    from s3_archive.config.lifecycle import LifecyclePolicy

    with pytest.raises(ValueError, match="S3 must not expire or archive files under an Iceberg table"):
        build_lifecycle_assets(parse_settings(ICE), {"ice": LifecyclePolicy(expiration_days=30)})
    assert isinstance(build_lifecycle_assets(parse_settings(ICE))[0], dg.AssetsDefinition)
