"""Restoring archives of Schema Registry payloads: byte-exact by default, and a disaster-recovery restore into a new
cluster's registry that re-registers each archived schema and rewrites every record's schema id, after the source
registry has lost the schemas. Checked with confluent-kafka's deserializers against the target registry."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from s3_archive.archive.driver.archive_run import ArchiveContext
from s3_archive.archive.driver.coordinator import archive_window
from s3_archive.io.registry_client import RegistryConnection
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.request import RestoreContext, RestoreRequest
from s3_archive.restore.run import restore_windows
from s3_archive.restore.schema_ids import SchemaRewrite
from s3_archive.restore.sources import ArchiveSource
from s3_archive_tests.integration.archive_helpers import archive_config, final_objects, log
from s3_archive_tests.kafka_helpers import consume_all, create_topic, produce

USER = {"type": "record", "name": "User", "namespace": "crm", "fields": [
    {"name": "id", "type": "long"}, {"name": "email", "type": ["null", "string"], "default": None}]}
USER_KEY = {"type": "record", "name": "UserKey", "namespace": "crm", "fields": [{"name": "id", "type": "long"}]}


def outrun_ids(target: SchemaRegistryClient, source_id: int, unique: str) -> None:
    """Register schemas of no use in the target registry until its ids reach `source_id`, so that the id a restore
    registers there next differs from the source's whatever ran before (a fresh target numbers from 1, as the source
    did)."""
    n = 0
    while target.register_schema(f"pad-{unique}-{n}", Schema(json.dumps(
            {"type": "record", "name": f"Pad{unique}{n}", "fields": []}), "AVRO")) < source_id:
        n += 1


def test_dr_restore_rewrites_ids_into_a_new_registry(registry_server, target_registry_server, kafka, s3, services,
                                                     spark, unique):
    topic = create_topic(kafka, f"sr-dr-{unique}")
    source = SchemaRegistryClient({"url": registry_server.url, "timeout": 10})
    target = SchemaRegistryClient({"url": target_registry_server.url, "timeout": 10})
    vser = AvroSerializer(source, json.dumps(USER))
    kser = AvroSerializer(source, json.dumps(USER_KEY))
    rows = [(0, kser({"id": i}, SerializationContext(topic, MessageField.KEY)),
             vser({"id": i, "email": f"u{i}@x" if i % 2 else None}, SerializationContext(topic, MessageField.VALUE)),
             [("h", b"v")]) for i in range(5)]
    produced = produce(kafka, topic, rows)
    outrun_ids(target, int.from_bytes(produced[0].value[1:5], "big"), unique)
    cfg = archive_config(services.bucket, topic, f"srr/{unique}/", value_decoding={"type": "avro"},
                         key_decoding={"type": "avro"})
    window = OffsetWindow(0, 0, 5)
    registry = RegistryConnection(registry_server.url, timeout_s=10)
    archive_window(ArchiveContext.of_client(spark, kafka, s3, log, registry), cfg, topic, window)

    # the source registry loses the schemas: the archive still reads as a typed table and still restores
    for subject in (f"{topic}-value", f"{topic}-key"):
        source.delete_subject(subject)
        source.delete_subject(subject, permanent=True)
    [key] = final_objects(s3, cfg, topic)
    t = pq.read_table(io.BytesIO(s3.get_object(Bucket=cfg.bucket, Key=key)["Body"].read()))
    assert t.column("email").to_pylist() == [None, "u1@x", None, "u3@x", None]
    assert t.column("key_id").to_pylist() == [0, 1, 2, 3, 4]

    # byte-exact by default
    exact = create_topic(kafka, f"sr-dr-exact-{unique}")
    list(restore_windows(RestoreContext(kafka, s3, log), ArchiveSource(cfg.bucket, cfg.prefix),
                         RestoreRequest(topic, exact), [window]))
    assert [g.value for g in consume_all(kafka, exact)[0]] == [r.value for r in produced]

    # into the new cluster's registry: schemas registered there, ids rewritten
    dr = create_topic(kafka, f"sr-dr-new-{unique}")
    rewrite = SchemaRewrite(RegistryConnection(target_registry_server.url, timeout_s=10), "topic_name")
    list(restore_windows(RestoreContext(kafka, s3, log, schemas=rewrite), ArchiveSource(cfg.bucket, cfg.prefix),
                         RestoreRequest(topic, dr), [window]))
    got = consume_all(kafka, dr)[0]
    assert [g.headers for g in got] == [r.headers for r in produced]
    new_value_id = target.get_latest_version(f"{dr}-value").schema_id
    assert {int.from_bytes(g.value[1:5], "big") for g in got} == {new_value_id}
    assert new_value_id != int.from_bytes(produced[0].value[1:5], "big")
    assert [g.value[5:] for g in got] == [r.value[5:] for r in produced]  # only the id changed
    vde, kde = AvroDeserializer(target), AvroDeserializer(target)
    assert [vde(g.value, SerializationContext(dr, MessageField.VALUE)) for g in got] == \
        [{"id": i, "email": f"u{i}@x" if i % 2 else None} for i in range(5)]
    assert [kde(g.key, SerializationContext(dr, MessageField.KEY)) for g in got] == [{"id": i} for i in range(5)]

    # RecordNameStrategy: the subject is the record's full name
    named = create_topic(kafka, f"sr-dr-named-{unique}")
    named_rewrite = SchemaRewrite(RegistryConnection(target_registry_server.url, timeout_s=10), "record_name")
    list(restore_windows(RestoreContext(kafka, s3, log, schemas=named_rewrite), ArchiveSource(cfg.bucket, cfg.prefix),
                         RestoreRequest(topic, named), [window]))
    assert {"crm.User", "crm.UserKey"} <= set(target.get_subjects())
    assert len(consume_all(kafka, named)[0]) == 5


def test_a_window_whose_framed_records_are_all_dead_letters_is_never_restored_with_ids_no_one_vouches_for(
        registry_server, target_registry_server, kafka, s3, services, spark, unique):
    import pytest

    from s3_archive.model.errors import InvalidRestore

    topic = create_topic(kafka, f"sr-dr-dead-{unique}")
    source = SchemaRegistryClient({"url": registry_server.url, "timeout": 10})
    target = SchemaRegistryClient({"url": target_registry_server.url, "timeout": 10})
    good = AvroSerializer(source, json.dumps(USER))({"id": 1, "email": None},
                                                    SerializationContext(topic, MessageField.VALUE))
    sid = int.from_bytes(good[1:5], "big")
    outrun_ids(target, sid, unique)
    # framed with a real id, but bodies that do not decode: every record is a dead letter, the manifest lists no
    # schema
    values = [good[:5] + b"\xff\xff\xff" + bytes([i]) for i in range(3)]
    produced = produce(kafka, topic, [(0, None, v, []) for v in values])
    cfg = archive_config(services.bucket, topic, f"srdead/{unique}/",
                         value_decoding={"type": "avro", "on_error": "dead_letter"})
    window = OffsetWindow(0, 0, 3)
    m = archive_window(ArchiveContext.of_client(spark, kafka, s3, log, RegistryConnection(registry_server.url,
                                                                                          timeout_s=10)),
                       cfg, topic, window).manifest
    assert m.undecodable_records == 3 and not m.schemas

    def restore(rewrite: SchemaRewrite) -> str:
        dr = create_topic(kafka, f"sr-dr-dead-{rewrite.unlisted}-{rewrite.source is not None}-{unique}")
        list(restore_windows(RestoreContext(kafka, s3, log, schemas=rewrite), ArchiveSource(cfg.bucket, cfg.prefix),
                             RestoreRequest(topic, dr), [window]))
        return dr

    into = RegistryConnection(target_registry_server.url, timeout_s=10)
    refused = SchemaRewrite(into, "topic_name")
    with pytest.raises(InvalidRestore) as e:
        restore(refused)
    assert (f"window {window.key}: the value of the record at offset 0 is framed with schema id {sid}, which the "
            "window's manifest does not list") in str(e.value) and "nothing was restored" in str(e.value)
    dr = f"sr-dr-dead-refuse-False-{unique}"
    assert consume_all(kafka, dr)[0] == []  # refused before producing anything

    # the source registry still knows the id: its schema is registered in the target and the ids rewritten
    resolved = SchemaRewrite(into, "topic_name", source=RegistryConnection(registry_server.url, timeout_s=10))
    dr = restore(resolved)
    got = consume_all(kafka, dr)[0]
    new_id = target.get_latest_version(f"{dr}-value").schema_id
    assert new_id != sid and [g.value for g in got] == [b"\x00" + new_id.to_bytes(4, "big") + v[5:] for v in values]
    assert resolved.counts[window].metadata() == {"schemas_registered": 1, "schema_ids_rewritten": 3,
                                                  "records_kept_with_unlisted_ids": 0}

    # told to keep them: restored as they are, and counted
    kept = SchemaRewrite(into, "topic_name", "keep")
    dr = restore(kept)
    assert [g.value for g in consume_all(kafka, dr)[0]] == [r.value for r in produced]
    assert kept.counts[window].metadata() == {"schemas_registered": 0, "schema_ids_rewritten": 0,
                                              "records_kept_with_unlisted_ids": 3}
