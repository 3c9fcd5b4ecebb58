"""The catalog reads manifests for the decoded columns (each partition's newest) and the avro literal (the newest
window with objects); moto, manifests written by hand. One that does not parse is a logged warning naming its key,
and the others still count."""

from __future__ import annotations

import io
import logging

import fastavro

from s3_archive.catalog.avro_header import newest_writer_schema
from s3_archive.catalog.glue import latest_schemas
from s3_archive.keys.objects import manifest_key, object_key
from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.manifests import hand_manifest


def test_a_newest_manifest_that_does_not_parse_is_a_warning_naming_its_key(s3, services, unique, caplog):
    topic, prefix = f"schemas-{unique}", f"schemas/{unique}/"
    older, newest, bad = OffsetWindow(0, 0, 5), OffsetWindow(0, 5, 9), OffsetWindow(1, 0, 5)
    for w, schema in ((older, "old"), (newest, "new")):
        body = hand_manifest(topic, w, schema=schema).dumps()
        s3.put_object(Bucket=services.bucket, Key=manifest_key(prefix, topic, w), Body=body)
    bad_key = manifest_key(prefix, topic, bad)
    s3.put_object(Bucket=services.bucket, Key=bad_key, Body=b'{"manifest_version": 1}')
    log = logging.getLogger("s3_archive_tests.catalog")

    with caplog.at_level(logging.WARNING, logger=log.name):
        assert latest_schemas(s3, services.bucket, prefix, topic, log) == {manifest_key(prefix, topic, newest): "new"}

    [warning] = [r.getMessage() for r in caplog.records if r.name == log.name]
    assert f"manifest s3://{services.bucket}/{bad_key} (manifest_version 1) is malformed: " in warning
    assert "`writer`, `topic`, `partition`," in warning and "are missing" in warning and repr(topic) in warning


def test_the_avro_literal_skips_a_newest_manifest_that_does_not_parse_with_a_warning(s3, services, unique, caplog):
    topic, prefix = f"avrohdr-{unique}", f"avrohdr/{unique}/"
    good, bad = OffsetWindow(0, 0, 1), OffsetWindow(0, 1, 2)  # same LastModified second: the key breaks the tie
    schema = {"type": "record", "name": "topLevelRecord", "fields": [{"name": "key", "type": ["bytes", "null"]}]}
    buf = io.BytesIO()
    fastavro.writer(buf, schema, [{"key": b"k"}])
    key = object_key(prefix, topic, good, 0, ".avro")
    etag = s3.put_object(Bucket=services.bucket, Key=key, Body=buf.getvalue())["ETag"].strip('"')
    manifest = hand_manifest(topic, good, [{"key": key, "size": len(buf.getvalue()), "etag": etag}], format="avro")
    s3.put_object(Bucket=services.bucket, Key=manifest_key(prefix, topic, good), Body=manifest.dumps())
    bad_key = manifest_key(prefix, topic, bad)
    s3.put_object(Bucket=services.bucket, Key=bad_key, Body=b"not json")
    log = logging.getLogger("s3_archive_tests.catalog")

    with caplog.at_level(logging.WARNING, logger=log.name):
        writer = newest_writer_schema(s3, services.bucket, prefix, topic, log)

    assert writer is not None and (writer.object_key, writer.manifest_key) == (key, manifest_key(prefix, topic, good))
    assert writer.field_names() == ["key"]
    [warning] = [r.getMessage() for r in caplog.records if r.name == log.name]
    assert f"manifest s3://{services.bucket}/{bad_key} is not JSON" in warning
