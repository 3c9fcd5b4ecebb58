"""Metadata as Dagster shows it: every value typed explicitly (numbers as `MetadataValue.int/float`, so the UI plots
them), and the asset descriptions' links (manifest prefix, Glue table, docs)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import dagster as dg

from s3_archive.catalog.mappings import no_table_reason
from s3_archive.catalog.tables import options_for, table_name
from s3_archive.config.archive import ArchiveConfig
from s3_archive.keys.objects import manifest_prefix

# The keys every window materialization of the archive and the restore assets carries, numeric, for the plots.
PLOT_KEYS = {"records": int, "bytes": int, "seconds": float, "records_per_second": float, "lag_seconds": float}
DOCS = "docs/metadata.md"  # in the s3-archive repository


def typed(meta: Mapping[str, Any]) -> dict[str, dg.MetadataValue]:
    """`meta` (plain values, or values typed already) with an explicit type per value: bool, int, float, S3 URL
    (a path), text, JSON.
    None is refused: a key's type must not change from one window to the next."""
    out: dict[str, dg.MetadataValue] = {}
    for k, v in meta.items():
        if isinstance(v, dg.MetadataValue):
            out[k] = v  # typed already (e.g. a restore's `ignored` keys as JSON)
        elif isinstance(v, bool):
            out[k] = dg.MetadataValue.bool(v)
        elif k in PLOT_KEYS:
            out[k] = dg.MetadataValue.int(int(v)) if PLOT_KEYS[k] is int else dg.MetadataValue.float(float(v))
        elif isinstance(v, int):
            out[k] = dg.MetadataValue.int(v)
        elif isinstance(v, float):
            out[k] = dg.MetadataValue.float(v)
        elif isinstance(v, str):
            out[k] = dg.MetadataValue.path(v) if v.startswith("s3://") else dg.MetadataValue.text(v)
        elif isinstance(v, (dict, list)):
            out[k] = dg.MetadataValue.json(v)
        else:
            raise TypeError(f"metadata {k!r}: {v!r} has no fixed metadata type (None or {type(v).__name__})")
    return out


def ui_page(key: dg.AssetKey, view: str | None = None, label: str | None = None) -> str:
    """A Markdown link to an asset's page in the Dagster UI (`view`: partitions, checks, events), root-relative:
    it works where the UI is served at the root of its host (not under a `--path-prefix`)."""
    path = "/assets/" + "/".join(quote(part, safe="") for part in key.path) + (f"?view={view}" if view else "")
    return f"[{label or key.to_user_string()}]({path})"


def s3_console(bucket: str, prefix: str) -> str:
    return f"https://s3.console.aws.amazon.com/s3/buckets/{bucket}?prefix={quote(prefix)}"


def links(bucket: str, manifests: str, table: str | None, docs: str) -> str:
    """Markdown lines for an asset's description: its manifest prefix, its Glue table, the docs."""
    lines = [f"- Manifests: `s3://{bucket}/{manifests}` ([S3 console]({s3_console(bucket, manifests)}))"]
    if table is not None:
        db, _, name = table.partition(".")
        lines.append(f"- Glue table: `{table}` ([Glue console](https://console.aws.amazon.com/glue/home#/v2/"
                     f"data-catalog/tables/view/{name}?database={db}))")
    lines.append(f"- Docs: `{docs}`, metadata keys: `{DOCS}` (in the s3-archive repository)")
    return "\n".join(lines)


def archive_links(cfg: ArchiveConfig, topic: str, docs: str) -> str:
    """`links` of a topic of `cfg`: its manifest prefix, its Glue table (when the archive has one), the docs."""
    table = None
    if no_table_reason(cfg) is None:
        try:
            options = options_for(cfg)
            table = f"{options.database}.{table_name(topic, options)}"
        except ValueError:  # the catalog asset reports it
            table = None
    return links(cfg.bucket, manifest_prefix(cfg.prefix, topic), table, docs)
