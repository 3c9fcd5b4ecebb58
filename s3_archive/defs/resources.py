"""The resources every definition shares (`kafka`, `s3`, `spark`), bound to environment variables with `dg.EnvVar`
(resolved when a run or a sensor tick starts, never at import). `$S3_ARCHIVE_ENV` picks the set: `local` (the
embedded stack's endpoints, path-style S3) or `aws` (no endpoint override; AWS's default credential chain).
"""

from __future__ import annotations

import dagster as dg
from dagster_aws.s3 import S3Resource

from s3_archive.io.kafka import KafkaResource
from s3_archive.io.spark import SparkResource

ENVS = ("local", "aws")


def check_env(env: str) -> str:
    if env not in ENVS:
        raise ValueError(f"S3_ARCHIVE_ENV must be 'local' or 'aws', got {env!r}")
    return env


def kafka_resource(env: str) -> KafkaResource:
    """The Kafka connection of the runs, sensors and `s3-archive refresh-topics` alike (SASL/TLS in `aws`)."""
    return KafkaResource(
        bootstrap_servers=dg.EnvVar("S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS"),
        **({} if check_env(env) == "local" else {
            "security_protocol": dg.EnvVar("S3_ARCHIVE_KAFKA_SECURITY_PROTOCOL"),
            "sasl_mechanism": dg.EnvVar("S3_ARCHIVE_KAFKA_SASL_MECHANISM"),
            "sasl_username": dg.EnvVar("S3_ARCHIVE_KAFKA_SASL_USERNAME"),
            "sasl_password": dg.EnvVar("S3_ARCHIVE_KAFKA_SASL_PASSWORD"),
        }),
    )


def build_resources(env: str) -> dict[str, dg.ConfigurableResource]:
    kafka = kafka_resource(env)
    if env == "local":
        endpoint = dg.EnvVar("S3_ARCHIVE_S3_ENDPOINT_URL")
        s3 = S3Resource(endpoint_url=endpoint, region_name=dg.EnvVar("AWS_REGION"),
                        aws_access_key_id=dg.EnvVar("AWS_ACCESS_KEY_ID"),
                        aws_secret_access_key=dg.EnvVar("AWS_SECRET_ACCESS_KEY"))
        spark = SparkResource(s3_endpoint_url=endpoint, s3_region=dg.EnvVar("AWS_REGION"),
                              s3_access_key_id=dg.EnvVar("AWS_ACCESS_KEY_ID"),
                              s3_secret_access_key=dg.EnvVar("AWS_SECRET_ACCESS_KEY"), s3_path_style=True)
    else:
        s3 = S3Resource(region_name=dg.EnvVar("AWS_REGION"))
        spark = SparkResource(s3_region=dg.EnvVar("AWS_REGION"), master=dg.EnvVar("S3_ARCHIVE_SPARK_MASTER"))
    return {"kafka": kafka, "s3": s3, "spark": spark}
