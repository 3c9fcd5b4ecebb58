"""The local stack keeps its state across a restart: moto's recording brings the bucket (and Glue) back as it was;
and the demo refuses to start on an instance and a bucket that disagree."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import boto3
import dagster as dg
import pytest

from s3_archive.config.archive import ArchiveConfig
from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
from s3_archive.keys.objects import manifest_key
from s3_archive.local.demo import check_consistent, lost_windows
from s3_archive.local.moto_server import MotoServer, compact_recording
from s3_archive.local.processes import StackError, purge_command
from s3_archive.local.stack import LOCAL_AWS
from s3_archive.model.windows import OffsetWindow


def client(service: str, moto: MotoServer):
    return boto3.client(service, endpoint_url=moto.endpoint_url, region_name=LOCAL_AWS["AWS_REGION"],
                        aws_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"])


def contents(s3, bucket: str) -> dict[str, str]:
    listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: hashlib.sha256(s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()).hexdigest()
            for o in listed}


def test_a_restarted_moto_server_with_a_recording_has_the_bucket_it_had(tmp_path):
    recording = tmp_path / "moto" / "recording.jsonl"
    moto = MotoServer(tmp_path / "moto", recording=recording)
    moto.start()
    try:
        s3, glue = client("s3", moto), client("glue", moto)
        s3.create_bucket(Bucket="recorded")
        s3.put_object(Bucket="recorded", Key="a/one", Body=b"\x00\x01" * 1000)
        s3.put_object(Bucket="recorded", Key="a/gone", Body=b"x")
        s3.put_object(Bucket="recorded", Key="_manifests/w1.json", Body=b"{}", IfNoneMatch="*")
        # a conditional PUT that lost: replayed, it loses again
        try:
            s3.put_object(Bucket="recorded", Key="_manifests/w1.json", Body=b"{\"other\": 1}", IfNoneMatch="*")
        except s3.exceptions.ClientError:
            pass
        s3.delete_objects(Bucket="recorded", Delete={"Objects": [{"Key": "a/gone"}]})
        upload = s3.create_multipart_upload(Bucket="recorded", Key="big")["UploadId"]
        parts = [{"PartNumber": n, "ETag": s3.upload_part(Bucket="recorded", Key="big", UploadId=upload, PartNumber=n,
                                                          Body=bytes([n]) * (5 * 1024 * 1024 if n == 1 else 10)
                                                          )["ETag"]} for n in (1, 2)]
        s3.complete_multipart_upload(Bucket="recorded", Key="big", UploadId=upload, MultipartUpload={"Parts": parts})
        glue.create_database(DatabaseInput={"Name": "db"})
        before = contents(s3, "recorded")
        etags = {o["Key"]: o["ETag"] for o in s3.list_objects_v2(Bucket="recorded")["Contents"]}
    finally:
        moto.stop()
    assert recording.stat().st_mode & 0o077 == 0  # request headers: the owner's only

    again = MotoServer(tmp_path / "moto", recording=recording)
    again.start()
    try:
        s3, glue = client("s3", again), client("glue", again)
        assert contents(s3, "recorded") == before
        assert set(before) == {"a/one", "_manifests/w1.json", "big"}
        assert {o["Key"]: o["ETag"] for o in s3.list_objects_v2(Bucket="recorded")["Contents"]} == etags
        assert s3.get_object(Bucket="recorded", Key="_manifests/w1.json")["Body"].read() == b"{}"
        assert glue.get_database(Name="db")["Database"]["Name"] == "db"
        s3.put_object(Bucket="recorded", Key="a/after", Body=b"y")
    finally:
        again.stop()
    third = MotoServer(tmp_path / "moto", recording=recording)
    third.start()
    try:
        assert set(contents(client("s3", third), "recorded")) == {"a/one", "_manifests/w1.json", "big", "a/after"}
    finally:
        third.stop()
    # Reads are dropped before each replay: the recording grows with the requests that change state only.
    compact_recording(recording)
    methods = {json.loads(line)["method"] for line in recording.read_text().splitlines()}
    assert methods <= {"PUT", "POST", "DELETE"} and "PUT" in methods


def test_the_demo_refuses_to_start_when_committed_windows_are_not_in_the_bucket(s3, services, unique):
    topic, prefix = f"lost-{unique}", f"lost-{unique}/"
    cfg = ArchiveConfig(name="lost", topics=[topic], bucket=services.bucket, prefix=prefix)
    windows = [OffsetWindow(0, 0, 10), OffsetWindow(0, 10, 20), OffsetWindow(1, 0, 5)]
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(window_partitions(topic).name, [w.key for w in windows])
    for w in windows[:2]:  # the third window was cut, never archived: not the bucket's to have
        instance.report_runless_asset_event(dg.AssetMaterialization(archive_asset_key(topic), partition=w.key))
    s3.put_object(Bucket=services.bucket, Key=manifest_key(prefix, topic, windows[0]), Body=b"{}")

    assert lost_windows(instance, s3, cfg) == {topic: [windows[1].key]}
    with pytest.raises(StackError) as e:
        check_consistent(instance, s3, [cfg], Path("/x/dagster_home"))
    assert str(e.value) == (
        f"the Dagster instance in /x/dagster_home has committed windows whose manifests are not in the local bucket "
        f"({topic}: 1 (first {windows[1].key})): the instance and the bucket are not from the same stack. To start "
        f"over with empty local state: `{purge_command()}`, then `make demo` again")

    s3.put_object(Bucket=services.bucket, Key=manifest_key(prefix, topic, windows[1]), Body=b"{}")
    check_consistent(instance, s3, [cfg], Path("/x/dagster_home"))


def test_the_local_stacks_schema_registry_keeps_its_schemas_across_a_restart(tmp_path):
    """`local up --schema-registry` keeps the registry's schemas in a file, as the broker and the bucket keep theirs:
    a schema registered before a restart has the same id after it; the tests' registries (in memory) do not."""
    import urllib.request

    from s3_archive.local.registry_server import SchemaRegistryServer

    schema = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]})

    def call(url: str, body: dict | None = None) -> object:
        req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    server = SchemaRegistryServer(tmp_path / "schema-registry", persistent=True)
    server.start()
    try:
        registered = call(f"{server.url}/subjects/orders-value/versions", {"schema": schema})["id"]
    finally:
        server.stop()
    again = SchemaRegistryServer(tmp_path / "schema-registry", persistent=True)
    again.start()
    try:
        assert call(f"{again.url}/subjects") == ["orders-value"]
        assert call(f"{again.url}/subjects/orders-value/versions/latest")["id"] == registered
    finally:
        again.stop()
