"""S3Resource and s3a: how objects are written (SSE-KMS, storage class), the settings' checks, and Spark's S3
settings without a secret on the JVM's command line."""

from __future__ import annotations

import pytest

from s3_archive.io import spark as spark_module
from s3_archive.io.s3_resource import S3Resource
from s3_archive.io.spark import DEFAULT_CREDENTIALS, SparkResource
from s3_archive.model.errors import InvalidConfig


class Sent(Exception):
    """Raised instead of sending: the request's headers, as botocore built them."""


def headers_of(client, call: str, **params) -> dict[str, str]:
    def grab(params, **_):
        raise Sent(dict(params["headers"]))
    client.meta.events.register(f"before-call.s3.{call}", grab)
    with pytest.raises(Sent) as sent:
        getattr(client, {"PutObject": "put_object", "CopyObject": "copy_object",
                         "CreateMultipartUpload": "create_multipart_upload"}[call])(**params)
    return sent.value.args[0]


def test_every_write_gets_the_kms_key_and_data_objects_the_storage_class():
    s3 = S3Resource(region_name="eu-west-1", sse_kms_key_id="alias/archive", storage_class="STANDARD_IA")
    client = s3.get_client()
    data = headers_of(client, "PutObject", Bucket="b", Key="kafka/orders/kafka_partition=0/x.parquet", Body=b"")
    assert (data["x-amz-server-side-encryption"], data["x-amz-server-side-encryption-aws-kms-key-id"],
            data["x-amz-storage-class"]) == ("aws:kms", "alias/archive", "STANDARD_IA")
    manifest = headers_of(client, "PutObject", Bucket="b", Key="kafka/_manifests/orders/kafka_partition=0/w.json",
                          Body=b"")
    assert manifest["x-amz-server-side-encryption"] == "aws:kms" and "x-amz-storage-class" not in manifest
    copy = headers_of(client, "CopyObject", Bucket="b", Key="kafka/orders/y.parquet",
                      CopySource={"Bucket": "b", "Key": "kafka/_staging/x"})
    assert copy["x-amz-storage-class"] == "STANDARD_IA" and copy["x-amz-server-side-encryption"] == "aws:kms"
    multipart = headers_of(client, "CreateMultipartUpload", Bucket="b", Key="kafka/orders/z.parquet")
    assert multipart["x-amz-storage-class"] == "STANDARD_IA"
    # A caller's own choice wins.
    own = headers_of(client, "PutObject", Bucket="b", Key="kafka/orders/w.parquet", Body=b"", StorageClass="STANDARD")
    assert own["x-amz-storage-class"] == "STANDARD"
    assert s3.object_write_args("kafka/orders/a.avro") == {"ServerSideEncryption": "aws:kms",
                                                           "SSEKMSKeyId": "alias/archive",
                                                           "StorageClass": "STANDARD_IA"}


def test_nothing_is_added_by_default_and_path_style_is_chosen():
    client = S3Resource(region_name="us-east-1", endpoint_url="http://127.0.0.1:9000", path_style=True).get_client()
    headers = headers_of(client, "PutObject", Bucket="b", Key="k", Body=b"")
    assert not {"x-amz-server-side-encryption", "x-amz-storage-class"} & set(headers)
    assert client.meta.config.s3["addressing_style"] == "path"


def test_clients_share_the_parsed_service_models_not_the_credentials():
    """Every client reads botocore's models through one loader (parsed once per process), while each resource's
    client keeps its own credentials and settings."""
    def signed_by(client) -> str:
        def grab(request, **_):
            raise Sent(request.headers["Authorization"].decode())
        client.meta.events.register("before-send.s3.PutObject", grab)
        with pytest.raises(Sent) as sent:
            client.put_object(Bucket="b", Key="k", Body=b"")
        return sent.value.args[0].split("Credential=")[1].split("/")[0]

    a = S3Resource(region_name="us-east-1", aws_access_key_id="AKIAFIRST", aws_secret_access_key="s1").get_client()
    b = S3Resource(region_name="eu-west-1", aws_access_key_id="AKIASECOND", aws_secret_access_key="s2").get_client()
    assert a._loader is b._loader
    assert a.meta.service_model.service_name == "s3"
    assert (signed_by(a), signed_by(b)) == ("AKIAFIRST", "AKIASECOND")
    assert (a.meta.region_name, b.meta.region_name) == ("us-east-1", "eu-west-1")


@pytest.mark.parametrize("settings,message", [
    ({"storage_class": "GLACIER"}, r"S3 storage class 'GLACIER' \(\$S3_ARCHIVE_S3_STORAGE_CLASS\) is not supported; "
                                   r"allowed: STANDARD, .*GLACIER_IR.* \(GLACIER and DEEP_ARCHIVE by a lifecycle"),
    ({"ca_bundle": "/nowhere/ca.pem"}, r"\$S3_ARCHIVE_S3_CA_BUNDLE is '/nowhere/ca.pem', which is not a readable"),
])
def test_settings_that_cannot_work_name_the_variable(settings, message):
    with pytest.raises(InvalidConfig, match=message):
        S3Resource(region_name="us-east-1", **settings).get_client()


@pytest.fixture
def jar_home(tmp_path, monkeypatch):
    monkeypatch.setenv("S3_ARCHIVE_HOME", str(tmp_path))
    d = tmp_path / "jars" / "spark"
    d.mkdir(parents=True)
    (d / "hadoop-aws-3.4.1.jar").write_bytes(b"")
    return d


def test_static_keys_reach_s3a_through_the_session_never_the_conf(jar_home):
    spark = SparkResource(s3_access_key_id="AKIA", s3_secret_access_key="secret-x", s3_session_token="token-x")
    conf = spark.spark_conf()
    assert not any(s in v for v in conf.values() for s in ("secret-x", "token-x"))
    assert conf["spark.hadoop.fs.s3a.aws.credentials.provider"].endswith(".TemporaryAWSCredentialsProvider")
    assert spark.s3a_secret_conf() == {"fs.s3a.access.key": "AKIA", "fs.s3a.secret.key": "secret-x",
                                       "fs.s3a.session.token": "token-x"}
    assert SparkResource().spark_conf()["spark.hadoop.fs.s3a.aws.credentials.provider"] == DEFAULT_CREDENTIALS


def test_a_ca_bundle_becomes_a_truststore_for_driver_and_executors(jar_home, tmp_path, monkeypatch):
    made = []

    def truststore(bundle: str, where: str):
        made.append((bundle, where))
        return tmp_path / "t.p12"
    monkeypatch.setattr(spark_module, "java_truststore", truststore)
    conf = SparkResource(s3_ca_bundle="/ca.pem", extra_conf={}).spark_conf()
    assert made == [("/ca.pem", "$S3_ARCHIVE_S3_CA_BUNDLE")]
    for side in ("driver", "executor"):
        assert f"-Djavax.net.ssl.trustStore={tmp_path / 't.p12'} -Djavax.net.ssl.trustStoreType=PKCS12" in \
            conf[f"spark.{side}.extraJavaOptions"]
    with pytest.raises(InvalidConfig, match=r"storage class 'DEEP_ARCHIVE'"):
        SparkResource(s3_storage_class="DEEP_ARCHIVE").spark_conf()


def test_the_glue_catalogs_account_is_asked_of_sts_once_per_process_and_settings(monkeypatch):
    from moto import mock_aws

    asked: list[str] = []
    real = S3Resource._session

    def counting(self):
        session = real(self)
        make = session.client

        def client(name, **kw):
            asked.append(name)
            return make(name, **kw)
        session.client = client
        return session

    monkeypatch.setattr(S3Resource, "_session", counting)
    with mock_aws():
        s3 = S3Resource(region_name="eu-central-1", aws_access_key_id="AKIATEST", aws_secret_access_key="x",
                        glue_endpoint_url="")
        assert s3.glue_account() == s3.glue_account() == ("eu-central-1", "123456789012")
        assert S3Resource(region_name="eu-west-1", aws_access_key_id="AKIATEST", aws_secret_access_key="x",
                          glue_endpoint_url="").glue_account() == ("eu-west-1", "123456789012")
    assert asked == ["sts", "sts"]  # one call for each region, none for the second ask
