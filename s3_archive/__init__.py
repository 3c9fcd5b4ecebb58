"""s3-archive: Kafka topics archived to S3 by Spark, exactly once, as Dagster assets."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """The component types (`s3_archive.KafkaArchive` in a defs.yaml; docs/components.md), imported when asked
    for: importing the package loads nothing else."""
    if name in ("KafkaArchive", "KafkaRestoreTarget"):
        from s3_archive import components

        return getattr(components, name)
    raise AttributeError(f"module 's3_archive' has no attribute {name!r}")


def __dir__() -> list[str]:
    return ["KafkaArchive", "KafkaRestoreTarget", "__version__"]
