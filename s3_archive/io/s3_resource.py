"""S3Resource: the S3 connection of every stage (and the Glue client of the catalog), one setting per environment
variable (`S3_ENV`, bound in defs/resources.py): an endpoint or AWS's own, the region, static keys or AWS's default
credential chain, path-style addressing, a CA bundle for a custom endpoint, and how objects are written (SSE-KMS key,
storage class), botocore's retries (mode, attempts). The same settings reach Spark's s3a through `SparkResource`
(io/spark.py).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import dagster as dg
from pydantic import Field

from s3_archive.keys.objects import MANIFESTS
from s3_archive.model.errors import InvalidConfig

if TYPE_CHECKING:
    import boto3
    from botocore.config import Config

# Classes whose objects can be read at once: the archive re-reads what it writes (checks, catalog, restore). The
# archive tiers (GLACIER, DEEP_ARCHIVE) come by a lifecycle transition (docs/catalog-and-lifecycle.md).
STORAGE_CLASSES = ("STANDARD", "STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING", "GLACIER_IR", "REDUCED_REDUNDANCY")
# Each S3Resource setting and the environment variable it is read from (docs/configuration.md, "Environment").
S3_ENV = {
    "endpoint_url": "S3_ARCHIVE_S3_ENDPOINT_URL",
    "region_name": "S3_ARCHIVE_S3_REGION",
    "aws_access_key_id": "S3_ARCHIVE_S3_ACCESS_KEY_ID",
    "aws_secret_access_key": "S3_ARCHIVE_S3_SECRET_ACCESS_KEY",
    "aws_session_token": "S3_ARCHIVE_S3_SESSION_TOKEN",
    "path_style": "S3_ARCHIVE_S3_PATH_STYLE",
    "ca_bundle": "S3_ARCHIVE_S3_CA_BUNDLE",
    "sse_kms_key_id": "S3_ARCHIVE_S3_SSE_KMS_KEY_ID",
    "storage_class": "S3_ARCHIVE_S3_STORAGE_CLASS",
    "glue_endpoint_url": "S3_ARCHIVE_GLUE_ENDPOINT_URL",
    "max_attempts": "S3_ARCHIVE_S3_MAX_ATTEMPTS",
    "retry_mode": "S3_ARCHIVE_S3_RETRY_MODE",
}
# botocore's retry modes (docs/configuration.md, "Environment", S3): standard retries throttling, 5xx and dropped
# connections with jittered exponential backoff; adaptive adds a client-side rate limiter on throttling.
RETRY_MODES = ("standard", "adaptive", "legacy")
# The calls that create an object: each gets the write settings unless it names them itself.
_WRITES = ("PutObject", "CopyObject", "CreateMultipartUpload")
# (region, account id) of the Glue catalog per connection settings: asked once per process (`S3Resource.glue_account`)
_GLUE_ACCOUNTS: dict[tuple[str | None, ...], tuple[str, str]] = {}


def _env(field: str) -> str:
    return f"${S3_ENV[field]}"


def check_storage_class(value: str | None, where: str) -> None:
    if value is not None and value not in STORAGE_CLASSES:
        raise InvalidConfig(f"S3 storage class {value!r} ({where}) is not supported; allowed: "
                            f"{', '.join(STORAGE_CLASSES)} (GLACIER and DEEP_ARCHIVE by a lifecycle transition)")


def check_retries(mode: str, attempts: int, where: str) -> None:
    if mode not in RETRY_MODES:
        raise InvalidConfig(f"S3 retry mode {mode!r} ({where}) is not supported; allowed: {', '.join(RETRY_MODES)}")
    if attempts < 0:
        raise InvalidConfig(f"S3 max attempts {attempts} ({_env('max_attempts')}) is not allowed: 0 or more "
                            "(retries after the first try)")


def check_ca_bundle(path: str | None, where: str) -> None:
    if path and not os.path.isfile(path):
        raise InvalidConfig(f"{where} is {path!r}, which is not a readable file")


_loaders: dict[str | None, Any] = {}  # botocore's data loader per data path: every session of the process shares it


def _botocore_session() -> Any:
    """A new botocore session (its own credentials, profile and settings) that reads botocore's service models
    through the process's one loader, which keeps what it parsed. A session of its own loader parses the S3 model
    and the endpoint rules again: 0.13 of a client's 0.17 CPU-s, and a run makes two clients (the step's and the
    archive's; docs/performance.md, "Warm archive")."""
    import botocore.loaders
    import botocore.session

    session = botocore.session.get_session()
    data_path = session.get_config_variable("data_path")
    if data_path not in _loaders:
        _loaders[data_path] = botocore.loaders.create_loader(data_path)
    session.register_component("data_loader", _loaders[data_path])
    return session


class S3Resource(dg.ConfigurableResource, dg.IAttachDifferentObjectToOpContext):
    """The settings of dagster-aws's S3Resource plus what the archive needs: path-style addressing, a CA bundle for
    a custom endpoint, SSE-KMS and a storage class applied to every object the client writes, and the Glue client.
    Its own class, not a subclass: importing dagster_aws costs every process that loads the definitions about a
    second (its package imports all its components); boto3 is imported when the first client is made. As
    dagster-aws's, `context.resources.s3` in an op or asset is the client (`get_client`).

    No static keys: boto3's default chain (environment, profile, web identity, container or instance role)."""

    use_unsigned_session: bool = Field(default=False, description="an unsigned S3 session")
    region_name: str | None = Field(default=None, description="the region; None: boto3's default chain")
    endpoint_url: str | None = Field(default=None, description="a custom endpoint; None: AWS's own")
    max_attempts: int = Field(default=5, description="boto3's retry handler's maximum attempts, the first included")
    profile_name: str | None = Field(default=None, description="a profile of the AWS config files")
    use_ssl: bool = Field(default=True, description="whether to use SSL")
    verify: bool | None = Field(default=None, description="whether to verify certificates; None: yes")
    aws_access_key_id: str | None = Field(default=None, description="static access key id; None: the default chain")
    aws_secret_access_key: str | None = Field(default=None, description="static secret key; None: the default "
                                              "chain")
    aws_session_token: str | None = Field(default=None, description="session token of temporary credentials")
    path_style: bool = Field(default=False, description="path-style addressing (most S3-compatible servers)")
    ca_bundle: str | None = Field(default=None, description="PEM CA bundle that signed a custom endpoint's "
                                  "certificate; None: the system's CAs")
    sse_kms_key_id: str | None = Field(default=None, description="SSE-KMS key id or ARN for every object written; "
                                       "None: the bucket's default encryption")
    storage_class: str | None = Field(default=None, description="storage class of the data objects written "
                                      "(manifests stay STANDARD); None: STANDARD")
    glue_endpoint_url: str | None = Field(default=None, description="Glue endpoint; None: endpoint_url (a local "
                                          "server serving both); '': AWS's own")
    retry_mode: str = Field(default="standard", description="botocore's retry mode: standard, adaptive (client-side "
                            "rate limiting on throttling) or legacy; `max_attempts` is botocore's "
                            "retries.max_attempts: retries after the first try")

    def check(self) -> None:
        check_storage_class(self.storage_class, _env("storage_class"))
        check_ca_bundle(self.ca_bundle, _env("ca_bundle"))
        check_retries(self.retry_mode, self.max_attempts, _env("retry_mode"))

    def _session(self) -> boto3.session.Session:
        import boto3

        return boto3.session.Session(botocore_session=_botocore_session(), profile_name=self.profile_name,
                                     region_name=self.region_name,
                                     aws_access_key_id=self.aws_access_key_id,
                                     aws_secret_access_key=self.aws_secret_access_key,
                                     aws_session_token=self.aws_session_token)

    def _verify(self) -> bool | str | None:
        return self.ca_bundle or self.verify

    def _config(self, **kw: Any) -> Config:
        from botocore import UNSIGNED
        from botocore.config import Config

        return Config(retries={"max_attempts": self.max_attempts, "mode": self.retry_mode},
                      signature_version=UNSIGNED if self.use_unsigned_session else None, **kw)

    def object_write_args(self, key: str) -> dict[str, str]:
        """The PutObject / CreateMultipartUpload / CopyObject arguments for an object at `key`: the SSE-KMS key and,
        for data objects, the storage class. For writers that do not use `get_client` (e.g. on executors)."""
        args: dict[str, str] = {}
        if self.sse_kms_key_id:
            args |= {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": self.sse_kms_key_id}
        if self.storage_class and MANIFESTS not in key.split("/"):
            args["StorageClass"] = self.storage_class
        return args

    def _apply_write_args(self, params: dict[str, Any], **_: Any) -> None:
        for k, v in self.object_write_args(params.get("Key", "")).items():
            params.setdefault(k, v)

    def get_client(self) -> Any:
        """A boto3 S3 client; every object it creates gets `object_write_args`."""
        self.check()
        client = self._session().client(
            "s3", endpoint_url=self.endpoint_url or None, use_ssl=self.use_ssl, verify=self._verify(),
            config=self._config(s3={"addressing_style": "path" if self.path_style else "auto"}))
        if self.sse_kms_key_id or self.storage_class:
            for op in _WRITES:
                client.meta.events.register(f"before-parameter-build.s3.{op}", self._apply_write_args)
        return client

    def get_object_to_set_on_execution_context(self) -> Any:
        return self.get_client()

    def glue_client(self) -> Any:
        """A Glue client with the same credentials, region and CA bundle (never logged)."""
        self.check()
        endpoint = self.endpoint_url if self.glue_endpoint_url is None else self.glue_endpoint_url
        return self._session().client("glue", endpoint_url=endpoint or None, use_ssl=self.use_ssl,
                                      verify=self._verify(), config=self._config())

    def glue_account(self) -> tuple[str, str]:
        """(region, account id) of the Glue catalog the Glue client reaches, for its tables' names in lineage
        (`arn:aws:glue:<region>:<account id>`): the account is STS GetCallerIdentity's, asked with the same
        credentials at the Glue endpoint (a local server answering both; AWS's own STS otherwise), once per process
        and connection settings. Raises botocore's error when STS cannot answer."""
        endpoint = self.endpoint_url if self.glue_endpoint_url is None else self.glue_endpoint_url
        key = (endpoint or None, self.region_name, self.profile_name, self.aws_access_key_id)
        if key not in _GLUE_ACCOUNTS:
            sts = self._session().client("sts", endpoint_url=endpoint or None, use_ssl=self.use_ssl,
                                         verify=self._verify(), config=self._config())
            _GLUE_ACCOUNTS[key] = (sts.meta.region_name, sts.get_caller_identity()["Account"])
        return _GLUE_ACCOUNTS[key]
