"""The archive YAML: pydantic models and loading. Errors name the key path and what is allowed, e.g.
`archives[0].flush.count: must be >= 1, got 0`.

    settings.py   Settings (the file), load_settings / parse_settings, topic_pattern resolution
    archive.py    ArchiveConfig and its parts: flush, envelope, value decoding (layout: keys/layout.py)
    catalog.py    CatalogOptions (the Glue table)
    lifecycle.py  LifecyclePolicy (S3 lifecycle rules), S3's transition constraints, when an object may have expired
    foreign.py    ForeignSource (an archive written by a Kafka Connect S3 sink, to restore)
    iceberg.py    IcebergOptions (`format: iceberg`)
    restore.py    RestoreTarget (an archive's declared `restore_targets`)
    connect_import/  `s3-archive import-connect`: a Kafka Connect S3 sink's config as an archive

Every model derives from model/base.StrictModel (unknown keys and stringly numbers are refused).
"""
