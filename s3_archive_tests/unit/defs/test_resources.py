"""One connection model: every Kafka, S3 and Spark setting is its own variable, so any combination works (the old
`S3_ARCHIVE_ENV=local|aws` switch decided Kafka auth and the S3 endpoint together)."""

from __future__ import annotations

import os

import dagster as dg
import pytest

from s3_archive.defs.resources import build_resources, spark_resource
from s3_archive.io.spark import DEFAULT_CREDENTIALS
from s3_archive.model.errors import InvalidConfig

SASL_SSL = {"S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS": "kafka.example:9096",
            "S3_ARCHIVE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "S3_ARCHIVE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "S3_ARCHIVE_KAFKA_SASL_USERNAME": "archiver", "S3_ARCHIVE_KAFKA_SASL_PASSWORD": "kafka-pw-never-shown"}


@pytest.fixture
def set_env(monkeypatch, tmp_path):
    """A clean environment: only what a test sets (and no jars needed for Spark's conf)."""
    import os

    for k in list(os.environ):
        if k.startswith(("S3_ARCHIVE_", "AWS_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("S3_ARCHIVE_HOME", str(tmp_path))
    (tmp_path / "jars" / "spark").mkdir(parents=True)
    (tmp_path / "jars" / "spark" / "spark-sql-kafka-0-10_2.13-4.0.0.jar").write_bytes(b"")

    def set_env(values: dict[str, str]) -> None:
        for k, v in values.items():
            monkeypatch.setenv(k, v)
    return set_env


def resolved() -> dict:
    with dg.build_resources(build_resources()) as res:
        return {"kafka": res.kafka, "s3": res.s3}


def test_sasl_ssl_and_an_s3_compatible_endpoint_combine(set_env, tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("pem")
    set_env({**SASL_SSL, "S3_ARCHIVE_KAFKA_SSL_CA_LOCATION": str(ca),
             "S3_ARCHIVE_S3_ENDPOINT_URL": "https://minio:9000", "S3_ARCHIVE_S3_ACCESS_KEY_ID": "minio-key",
             "S3_ARCHIVE_S3_SECRET_ACCESS_KEY": "s3-secret-never-shown", "AWS_REGION": "eu-west-1"})
    resources = build_resources()
    with dg.build_resources(resources) as res:
        kafka, s3 = res.kafka, res.s3
        assert kafka.client_config()["sasl.password"] == "kafka-pw-never-shown"
        assert kafka.client_config()["ssl.ca.location"] == str(ca)
        assert s3.meta.endpoint_url == "https://minio:9000" and s3.meta.region_name == "eu-west-1"
        assert s3.meta.config.s3["addressing_style"] == "path"  # on by default with an endpoint
        spark = res.spark
    conf = spark.spark_conf()
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "https://minio:9000"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith(".SimpleAWSCredentialsProvider")
    # The secret is never in the conf (it is the driver JVM's command line); it is set in the session at run time.
    assert not any("s3-secret-never-shown" in v for v in conf.values())
    assert spark.s3a_secret_conf() == {"fs.s3a.access.key": "minio-key", "fs.s3a.secret.key": "s3-secret-never-shown"}
    # The UI shows the variables' names, never their values.
    shown = repr({k: r.model_dump() for k, r in resources.items()})
    assert "kafka-pw-never-shown" not in shown and "s3-secret-never-shown" not in shown


def test_aws_default_chain_with_plaintext_kafka(set_env):
    set_env({"S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS": "kafka:9092", "AWS_DEFAULT_REGION": "us-west-2"})
    with dg.build_resources(build_resources()) as res:
        assert res.kafka.client_config() == {"bootstrap.servers": "kafka:9092", "security.protocol": "PLAINTEXT"}
        assert res.s3.meta.endpoint_url == "https://s3.us-west-2.amazonaws.com"
        assert res.s3.meta.config.s3["addressing_style"] == "auto"
        conf = res.spark.spark_conf()
        assert res.spark.s3a_secret_conf() == {}
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"] == DEFAULT_CREDENTIALS
    # local[*]: two task slots per core (SparkResource.local_slots_per_core)
    assert "spark.hadoop.fs.s3a.endpoint" not in conf and conf["spark.master"] == f"local[{2 * os.cpu_count()}]"


def test_region_comes_from_ours_first_then_the_sdk_variables(set_env):
    set_env({"AWS_DEFAULT_REGION": "us-west-2", "AWS_REGION": "eu-west-1", "S3_ARCHIVE_S3_REGION": "ap-south-1"})
    assert build_resources()["s3"].region_name.env_var_name == "S3_ARCHIVE_S3_REGION"


def test_write_settings_path_style_and_glue_each_on_their_own(set_env):
    set_env({"S3_ARCHIVE_S3_ENDPOINT_URL": "http://127.0.0.1:9000", "S3_ARCHIVE_S3_PATH_STYLE": "false",
         "S3_ARCHIVE_S3_SSE_KMS_KEY_ID": "arn:aws:kms:eu-west-1:1:key/k", "S3_ARCHIVE_S3_STORAGE_CLASS": "STANDARD_IA",
         "S3_ARCHIVE_GLUE_ENDPOINT_URL": "", "S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS": "k:9092", "AWS_REGION": "eu-west-1"})
    with dg.build_resources(build_resources()) as res:
        assert res.s3.meta.config.s3["addressing_style"] == "auto"
        conf = res.spark.spark_conf()
        # Set but empty: AWS's own Glue, with an S3-compatible server for S3.
        glue = build_resources()["s3"].process_config_and_initialize().glue_client()
    assert glue.meta.endpoint_url == "https://glue.eu-west-1.amazonaws.com"
    assert conf["spark.hadoop.fs.s3a.encryption.algorithm"] == "SSE-KMS"
    assert conf["spark.hadoop.fs.s3a.encryption.key"] == "arn:aws:kms:eu-west-1:1:key/k"
    assert conf["spark.hadoop.fs.s3a.create.storage.class"] == "STANDARD_IA"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "false"


def test_spark_master_or_connect_but_not_both(set_env):
    set_env({"S3_ARCHIVE_SPARK_REMOTE": "sc://spark:15002"})
    spark = spark_resource()
    assert spark.remote.env_var_name == "S3_ARCHIVE_SPARK_REMOTE" and spark.master == "local[*]"
    set_env({"S3_ARCHIVE_SPARK_MASTER": "spark://spark:7077"})
    with pytest.raises(InvalidConfig, match=r"set one of \$S3_ARCHIVE_SPARK_MASTER .* and \$S3_ARCHIVE_SPARK_REMOTE"):
        spark_resource()


def test_a_bad_flag_names_its_variable(set_env):
    set_env({"S3_ARCHIVE_KAFKA_SSL_VERIFY_HOSTNAME": "maybe"})
    with pytest.raises(InvalidConfig, match=r"\$S3_ARCHIVE_KAFKA_SSL_VERIFY_HOSTNAME is 'maybe'; allowed: true or "
                                            "false"):
        build_resources()
    set_env({"S3_ARCHIVE_KAFKA_SSL_VERIFY_HOSTNAME": "off"})
    assert build_resources()["kafka"].ssl_verify_hostname is False


def test_the_kafka_request_timeout_is_a_number_of_seconds_and_a_bad_one_names_its_variable(set_env):
    set_env({"S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS": "kafka:9092"})
    assert build_resources()["kafka"].timeout_s == 15.0  # unset: the default
    set_env({"S3_ARCHIVE_KAFKA_TIMEOUT_S": "2.5"})
    with dg.build_resources(build_resources()) as res:
        assert res.kafka.timeout_s == 2.5
    for bad in ("0", "-1", "soon", "nan", "inf"):
        set_env({"S3_ARCHIVE_KAFKA_TIMEOUT_S": bad})
        with pytest.raises(InvalidConfig, match=rf"\$S3_ARCHIVE_KAFKA_TIMEOUT_S is '{bad}'; it must be a number of "
                                                "seconds > 0"):
            build_resources()


def test_the_retired_switch_warns_and_changes_nothing(set_env):
    set_env({"S3_ARCHIVE_ENV": "aws", "S3_ARCHIVE_S3_ENDPOINT_URL": "http://127.0.0.1:9000"})
    with pytest.warns(UserWarning, match=r"\$S3_ARCHIVE_ENV is no longer read"):
        resources = build_resources()
    assert resources["s3"].endpoint_url.env_var_name == "S3_ARCHIVE_S3_ENDPOINT_URL"
