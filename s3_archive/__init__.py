"""s3-archive: Kafka topics archived to S3 by Spark, exactly once, as Dagster assets."""

__version__ = "0.1.0"
