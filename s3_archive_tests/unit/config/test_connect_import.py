"""`s3-archive import-connect`: the connectors' documented examples (/work/shared/reference/) and configs users
posted in issues (found with the search tool's `issues` corpus; each cited where used) → YAML → the Settings
loader → the expected archive; keys rendered from it have the sink's shape and parse back with restore's reader
for that sink."""

from __future__ import annotations

import json

import pytest
import yaml

from s3_archive.cli import main
from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.connect_import.convert import import_connect
from s3_archive.config.foreign import ForeignSource
from s3_archive.config.settings import parse_settings
from s3_archive.keys.buckets import record_bucket
from s3_archive.keys.objects import object_key
from s3_archive.model.errors import UnsupportedConnectConfig
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.cold import ListedObject
from s3_archive.restore.foreign_sources import plan

W = OffsetWindow(3, 1000, 2000)


def archives(cfg: dict | str, **kw) -> list[ArchiveConfig]:
    text = cfg if isinstance(cfg, str) else json.dumps(cfg)
    out = import_connect(text, **kw)
    return parse_settings(yaml.safe_load(out)).archives


def one(cfg: dict | str, **kw) -> ArchiveConfig:
    [a] = archives(cfg, **kw)
    return a


def key(a: ArchiveConfig, topic: str, window: OffsetWindow = W, **record) -> str:
    """The key of the window's first object; `record` (key, value, headers, timestamp_us) picks its bucket."""
    bucket = record_bucket(a.layout, {"partition": window.partition, **record}) if record else None
    return object_key(a.prefix, topic, window, 0, a.object_suffix, a.layout, bucket)


def refused(cfg: dict | str) -> str:
    with pytest.raises(UnsupportedConnectConfig) as e:
        import_connect(cfg if isinstance(cfg, str) else json.dumps(cfg))
    return str(e.value)


def foreign_windows(source: ForeignSource, keys: list[str]) -> list[OffsetWindow]:
    p = plan(source, [ListedObject(k, 1) for k in keys])
    assert p.ignored == {}
    return [fw.window for fw in p.windows]


# --- Confluent ----------------------------------------------------------------------------------------------------

# s3-sink-connector-overview.md, "Complete Example" (+ a static secret, which must not be copied)
CONFLUENT_COMPLETE = {"name": "events-to-s3", "config": {
    "connector.class": "io.confluent.connect.s3.S3SinkConnector", "tasks.max": "6", "topics": "events,transactions",
    "s3.bucket.name": "analytics-data-lake", "s3.region": "us-east-1",
    "s3.credentials.provider.class": "com.amazonaws.auth.DefaultAWSCredentialsProviderChain",
    "format.class": "io.confluent.connect.s3.format.parquet.ParquetFormat", "parquet.codec": "snappy",
    "storage.class": "io.confluent.connect.s3.storage.S3Storage",
    "partitioner.class": "io.confluent.connect.storage.partitioner.TimeBasedPartitioner",
    "path.format": "'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH", "locale": "en-US", "timezone": "UTC",
    "partition.duration.ms": "3600000", "flush.size": "50000", "rotate.interval.ms": "600000",
    "s3.part.size": "52428800", "key.converter": "io.confluent.connect.avro.AvroConverter",
    "key.converter.schema.registry.url": "http://schema-registry:8081",
    "value.converter": "io.confluent.connect.avro.AvroConverter",
    "value.converter.schema.registry.url": "http://schema-registry:8081", "errors.tolerance": "all",
    "errors.deadletterqueue.topic.name": "dlq-s3-sink", "errors.deadletterqueue.topic.replication.factor": 3,
    "aws.access.key.id": "AKIAEXAMPLE", "aws.secret.access.key": "wJalrXUtnFEMI/K7MDENG-secret-value"}}


def test_confluent_complete_example():
    text = import_connect(json.dumps(CONFLUENT_COMPLETE), source="events.json")
    assert "wJalrXUtnFEMI" not in text and "S3_ARCHIVE_S3_SECRET_ACCESS_KEY=..." in text
    assert "S3_ARCHIVE_S3_REGION=us-east-1" in text
    a = one(CONFLUENT_COMPLETE)
    assert (a.name, a.topics, a.bucket, a.prefix) == ("events_to_s3", ["events", "transactions"],
                                                      "analytics-data-lake", "topics/")
    assert (a.format, a.codec, a.object_suffix) == ("parquet", "snappy", ".snappy.parquet")
    assert (a.flush.count, a.flush.interval_seconds) == (50000, 600)
    assert a.restorable  # the lossless envelope
    [dim] = a.layout.partition_by
    assert (dim.kind, dim.path_format, dim.duration_seconds) == ("time", "'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH",
                                                                 None)
    assert key(a, "events", timestamp_us=1_705_313_000_000_000) == \
        "topics/events/year=2024/month=01/day=15/hour=10/events+3+0000001000.snappy.parquet"
    for option in ("rotate.interval.ms=600000: approximate", "timestamp.extractor=Wallclock: approximate",
                   "tasks.max=6:", "s3.part.size=52428800:", "errors.tolerance=all:"):
        assert option in text


# s3-sink-connector-overview.md, "Default Partitioning" + "JSON" (+ gzip, as users set it)
def test_confluent_default_partitioner_json_keys_read_by_the_confluent_reader():
    a = one({"connector.class": "io.confluent.connect.s3.S3SinkConnector", "topics": "events",
             "s3.bucket.name": "data-lake-bucket", "flush.size": "10000", "s3.compression.type": "gzip",
             "format.class": "io.confluent.connect.s3.format.json.JsonFormat",
             "partitioner.class": "io.confluent.connect.storage.partitioner.DefaultPartitioner"})
    assert (a.format, a.codec, a.flush.count, a.flush.interval_seconds) == ("text", "gzip", 10000, None)
    keys = [key(a, "events", OffsetWindow(0, 0, 10)), key(a, "events", OffsetWindow(0, 10, 20))]
    assert keys[0] == "topics/events/partition=0/events+0+0000000000.json.gz"
    source = ForeignSource(name="s", layout="confluent", bucket="data-lake-bucket", topic="events", format="json",
                           compression="gzip")
    assert foreign_windows(source, keys)[0].start == 0 and foreign_windows(source, keys)[1].start == 10


# s3-sink-connector-overview.md, "Field-Based Partitioning"
def test_confluent_field_partitioner():
    a = one({"connector.class": "io.confluent.connect.s3.S3SinkConnector", "topics": "events",
             "s3.bucket.name": "data-lake-bucket", "flush.size": "1000",
             "format.class": "io.confluent.connect.s3.format.avro.AvroFormat",
             "partitioner.class": "io.confluent.connect.storage.partitioner.FieldPartitioner",
             "partition.field.name": "region,event_type"})
    assert (a.format, a.codec) == ("avro", "none")
    assert [d.field for d in a.layout.partition_by] == ["region", "event_type"]
    assert key(a, "events", OffsetWindow(0, 0, 5), value=b'{"region": "us-east", "event_type": "click"}') == \
        "topics/events/region=us-east/event_type=click/events+0+0000000000.avro"


# s3-sink-connector-overview.md, "Basic Configuration": TimeBasedPartitioner without path.format (the sink refuses
# it too) — the one error names the option.
def test_confluent_basic_example_without_path_format_is_refused():
    cfg = {"name": "s3-sink", "config": {
        "connector.class": "io.confluent.connect.s3.S3SinkConnector", "tasks.max": "3", "topics": "events",
        "s3.bucket.name": "data-lake-bucket", "s3.region": "us-east-1",
        "format.class": "io.confluent.connect.s3.format.parquet.ParquetFormat", "flush.size": "10000",
        "storage.class": "io.confluent.connect.s3.storage.S3Storage",
        "partitioner.class": "io.confluent.connect.storage.partitioner.TimeBasedPartitioner"}}
    assert refused(cfg) == "cannot import path.format=None: TimeBasedPartitioner needs path.format"


# User config, issues corpus: hongbo-miao/hongbomiao.com PR #40755 (s3-sink-connector.json): daily path.format
# with an hourly partition.duration.ms, and a store.url.
def test_confluent_user_config_daily_path_hourly_duration():
    a, text = None, import_connect(json.dumps({
        "connector.class": "io.confluent.connect.s3.S3SinkConnector", "topics": "sensor-telemetry-streams",
        "storage.class": "io.confluent.connect.s3.storage.S3Storage", "s3.bucket.name": "telemetry-bucket",
        "s3.region": "us-west-2", "store.url": "http://rustfs:9000",
        "format.class": "io.confluent.connect.s3.format.parquet.ParquetFormat", "parquet.codec": "snappy",
        "flush.size": "1000000", "rotate.interval.ms": "60000",
        "partitioner.class": "io.confluent.connect.storage.partitioner.TimeBasedPartitioner",
        "partition.duration.ms": "3600000", "path.format": "'year'=YYYY/'month'=MM/'day'=dd"}))
    [a] = parse_settings(yaml.safe_load(text)).archives
    assert "S3_ARCHIVE_S3_ENDPOINT_URL=http://rustfs:9000" in text
    assert "partition.duration.ms=3600000: approximate" in text
    assert a.layout.partition_by[0].duration_seconds is None and a.flush.count == 1_000_000


# User config, issues corpus: confluentinc/kafka-connect-storage-cloud #66 (avro, 10-minute buckets in an hourly
# path, topics.dir, locale fr).
def test_confluent_user_config_avro_ten_minute_buckets():
    a = one({"name": "s3-connector-events-v2", "config": {
        "connector.class": "io.confluent.connect.s3.S3SinkConnector", "s3.region": "eu-west-1",
        "s3.bucket.name": "avrodata", "s3.part.size": 5242880, "flush.size": 220000,
        "storage.class": "io.confluent.connect.s3.storage.S3Storage",
        "format.class": "io.confluent.connect.s3.format.avro.AvroFormat",
        "schema.generator.class": "io.confluent.connect.storage.hive.schema.TimeBasedSchemaGenerator",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "partitioner.class": "io.confluent.connect.storage.partitioner.TimeBasedPartitioner",
        "partition.duration.ms": 600000, "locale": "fr", "timezone": "UTC", "topics.dir": "kafka-connect-v2",
        "path.format": "'year'=YYYY/'month'=MM/'day'=dd/'hour'=HH", "tasks.max": "1", "topics": "avro-events"}})
    assert (a.name, a.prefix, a.format, a.flush.count) == ("s3_connector_events_v2", "kafka-connect-v2/", "avro",
                                                           220000)


# User config, issues corpus: confluentinc/kafka-connect-storage-cloud #729 (JsonFormat, empty topics.dir, a
# secret key, an option that is not the sink's).
def test_confluent_user_config_json_secret_and_unknown_option():
    cfg = {"name": "s3-sink-connector", "config": {
        "connector.class": "io.confluent.connect.s3.S3SinkConnector", "tasks.max": "1",
        "topics": "topic-test,topic-dev", "s3.bucket.name": "my-bucket", "store.url": "https://minio.local",
        "flush.size": "3", "format.class": "io.confluent.connect.s3.format.json.JsonFormat",
        "aws.access.key.id": "xxxxxxxxxx", "aws.secret.access.key": "xxxxxxxxxxx/xxxxxxxxx",
        "topics.dir": "", "topics.file.name.format": "dir1(${topic}).json", "rotate.schedule.interval.ms": "3600000"}}
    text = import_connect(json.dumps(cfg))
    assert "xxxxxxxxxxx/xxxxxxxxx" not in text
    assert "topics.file.name.format=dir1(${topic}).json: not an option s3-archive knows" in text
    a = one(cfg)
    assert (a.prefix, a.format, a.schedule_cron, a.flush.count) == ("", "text", "0 * * * *", 3)
    assert key(a, "topic-dev", OffsetWindow(1, 7, 10)) == "topic-dev/partition=1/topic-dev+1+0000000007.json"


# --- Aiven ------------------------------------------------------------------------------------------------------

# aiven-s3-sink-guide.txt, "Creating connector with RESTful API" (option names the page's extraction lost restored:
# aws.access.key.id, aws.s3.bucket.name)
AIVEN_GUIDE = {"name": "example-s3-sink", "config": {
    "connector.class": "io.aiven.kafka.connect.s3.AivenKafkaConnectS3SinkConnector",
    "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
    "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
    "aws.access.key.id": "AKI...", "aws.secret.access.key": "SECRET_ACCESS_KEY", "aws.s3.bucket.name": "aiven-example",
    "aws.s3.prefix": "example-s3-sink/", "aws.s3.region": "us-east-1", "file.compression.type": "gzip",
    "format.output.fields": "value,key,timestamp", "tasks.max": 1, "topics": "source_topic,another_topic"}}


def test_aiven_guide_example():
    text = import_connect(json.dumps(AIVEN_GUIDE))
    assert "SECRET_ACCESS_KEY" not in text.replace("S3_ARCHIVE_S3_SECRET_ACCESS_KEY", "")
    a = one(AIVEN_GUIDE)
    assert (a.format, a.codec, a.csv_fields, a.prefix) == ("csv", "gzip", ["value", "key", "timestamp"],
                                                           "example-s3-sink/")
    assert key(a, "source_topic") == "example-s3-sink/source_topic-3-1000.gz"


def test_aiven_jsonl_keys_read_by_the_aiven_reader():
    a = one({"connector.class": "io.aiven.kafka.connect.s3.AivenKafkaConnectS3SinkConnector", "topics": "orders",
             "aws_s3_bucket": "legacy-sink", "aws_s3_prefix": "kafka/", "format.output.type": "jsonl",
             "format.output.fields": "key,value,offset,timestamp,headers", "file.max.records": "500",
             "file.name.template": "{{topic}}-{{partition:padding=true}}-{{start_offset:padding=true}}",
             "aws_secret_access_key": "deprecated-name-secret"})
    assert (a.format, a.codec, a.flush.count, a.restorable) == ("jsonl", "gzip", 500, True)
    k = key(a, "orders")
    assert k == "kafka/orders-0000000003-00000000000000001000.gz"
    source = ForeignSource(name="s", layout="aiven", bucket="legacy-sink", prefix="kafka/", topic="orders",
                           format="jsonl", compression="gzip", template=a.layout.template,
                           fields=["key", "value", "offset", "timestamp", "headers"])
    assert foreign_windows(source, [k])[0].start == 1000


def test_aiven_refuses_what_it_cannot_honour():
    base = {"connector.class": "io.aiven.kafka.connect.s3.AivenKafkaConnectS3SinkConnector", "topics": "t",
            "aws.s3.bucket.name": "bkt"}
    assert refused({**base, "file.name.template": "{{key}}"}).startswith(
        "cannot import file.name.template='{{key}}': a template with {{topic}}, {{partition}} and {{start_offset}}")
    assert refused({**base, "format.output.type": "orc"}) == \
        "cannot import format.output.type='orc': allowed: csv, json, jsonl, avro, parquet"
    assert refused({**base, "aws.s3.prefix": "x/{{timestamp}}/"}) == (
        "cannot import aws.s3.prefix='x/{{timestamp}}/': placeholders {{utc_date}} and {{local_date}} only, not "
        "timestamp")
    assert one({**base, "format.output.type": "avro"}).codec == "deflate"  # the sink's default gzip, in Avro
    assert refused({**base, "format.output.type": "jsonl", "file.compression.type": "snappy"}) == \
        "cannot import file.compression.type='snappy': for format jsonl: allowed none, gzip, zstd"


# aiven-s3-source-connector.md: a *source* connector's config is not a sink's.
def test_aiven_source_connector_is_refused():
    msg = refused({"name": "aiven-s3-source-connector",
                   "connector.class": "io.aiven.kafka.connect.s3.source.S3SourceConnector",
                   "aws.s3.bucket.name": "my-s3-bucket", "topic": "test-topic", "input.format": "jsonl",
                   "aws.secret.access.key": "your-secret-access-key"})
    assert "a sink connector's config" in msg and "your-secret" not in msg


# --- Lenses KCQL -----------------------------------------------------------------------------------------------

# lenses-s3-sink.md, "Example" (properties file)
def test_lenses_properties_example():
    a = one("connector.class=io.lenses.streamreactor.connect.aws.s3.sink.S3SinkConnector\n"
            "connect.s3.kcql=insert into lensesio:demo select * from demo PARTITIONBY _value.ts STOREAS `JSON` "
            "PROPERTIES ('flush.size'=1000000, 'flush.interval'=30, 'flush.count'=5000)\ntopics=demo\nname=demo\n")
    assert (a.topics, a.bucket, a.prefix, a.format) == (["demo"], "lensesio", "demo/", "jsonl")
    assert (a.flush.count, a.flush.bytes, a.flush.interval_seconds) == (5000, 1_000_000, 30)
    assert [d.field for d in a.layout.partition_by] == ["ts"]
    assert key(a, "demo", value=b'{"ts": 1700000000}') == "demo/demo/ts=1700000000/demo(3_000000001000).json"


# lenses-s3-sink.md, "Rolling Windows": value fields and headers, SMTs, credentials mode
def test_lenses_rolling_windows_example_with_credentials():
    text = import_connect(
        "connector.class=io.lenses.streamreactor.connect.aws.s3.sink.S3SinkConnector\n"
        "connect.s3.kcql=insert into lensesio:demo select * from demo PARTITIONBY _value.metadata_id, "
        "_value.customer_id, _header.ts, _header.wallclock STOREAS `JSON` PROPERTIES ('flush.size'=1000000, "
        "'flush.interval'=30, 'flush.count'=5000)\ntopics=demo\nname=demo\n"
        "transforms=insertFormattedTs,insertWallclock\nconnect.s3.aws.auth.mode=Credentials\n"
        "connect.s3.aws.region=eu-west-2\nconnect.s3.aws.access.key=AKIA123\nconnect.s3.aws.secret.key=hunter2\n")
    assert "hunter2" not in text and "transforms=insertFormattedTs,insertWallclock: single message" in text
    [a] = parse_settings(yaml.safe_load(text)).archives
    assert [(d.kind, d.column) for d in a.layout.partition_by] == [
        ("value", "metadata_id"), ("value", "customer_id"), ("header", "ts"), ("header", "wallclock")]


# lenses-s3-sink.md, "Examples": bare KCQL, PARQUET; envelope to AVRO; several statements (Target Bucket and Path)
def test_lenses_bare_kcql_statements():
    a = one("INSERT INTO lensesioaws:car_speed SELECT * FROM car_speed_events STOREAS `PARQUET`")
    assert (a.name, a.format, a.codec, a.envelope.columns()) == ("car_speed_events", "parquet", "snappy", ["value"])
    assert key(a, "car_speed_events") == "car_speed/car_speed_events/3/000000001000.parquet"
    b = one("INSERT INTO lensesioaws:car_speed SELECT * FROM car_speed_events STOREAS `AVRO` "
            "PROPERTIES('store.envelope'=true)")
    assert b.restorable and b.format == "avro"
    x, y = archives("INSERT INTO testbucket:pathToWriteTo SELECT * FROM topicA; "
                    "INSERT INTO testbucket:path/To/Write/To SELECT * FROM topicB PARTITIONBY fieldA")
    assert (x.name, x.prefix, y.name, y.prefix) == ("topica", "pathToWriteTo/", "topicb", "path/To/Write/To/")
    assert key(y, "topicB", value=b'{"fieldA": "v"}') == "path/To/Write/To/topicB/fieldA=v/topicB(3_000000001000).json"


def test_lenses_escaped_names_padding_and_refusals():
    a = one("INSERT INTO `bucket-name`:`prefix` SELECT * FROM `kafka-topic` PARTITIONBY _key STOREAS `AVRO` "
            "PROPERTIES('padding.type'='NoOp', 'partition.include.keys'=false)")
    assert (a.bucket, a.topics, a.layout.padding.type) == ("bucket-name", ["kafka-topic"], "none")
    assert key(a, "kafka-topic", key=b"k1") == "prefix/kafka-topic/k1/kafka-topic(3_1000).avro"
    assert refused("INSERT INTO b1b:p SELECT * FROM t PARTITIONBY _date.uuuu") == (
        "cannot import PARTITIONBY='_date.uuuu': allowed: a value field (f or _value.f), _key, _key.f, _header.h, "
        "_partition, _topic")
    assert refused("INSERT INTO b1b SELECT * FROM t STOREAS `ORC`") == (
        "cannot import STOREAS='ORC': allowed: AVRO, PARQUET, JSON, CSV, CSV_WITHHEADERS, TEXT, BYTES")


# --- the command ------------------------------------------------------------------------------------------------

def test_cli_writes_the_yaml_and_reports_one_error(tmp_path, capsys):
    src = tmp_path / "sink.json"
    src.write_text(json.dumps(CONFLUENT_COMPLETE))
    out = tmp_path / "archive.yaml"
    assert main(["import-connect", str(src), "--out", str(out), "--name", "events"]) == 0
    assert parse_settings(yaml.safe_load(out.read_text())).archives[0].name == "events"
    assert capsys.readouterr().err == f"wrote {out}\n"
    src.write_text(json.dumps({**CONFLUENT_COMPLETE["config"], "partitioner.class": "x.Custom"}))
    assert main(["import-connect", str(src)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot import partitioner.class='x.Custom': allowed: DefaultPartitioner")
    assert "wJalrXUtnFEMI" not in err


def test_layout_extension_replaces_the_formats_and_is_checked():
    base = {"name": "a", "topics": ["t"], "bucket": "bkt", "format": "jsonl", "compression": "gzip",
            "layout": {"template": "{{topic}}-{{partition}}-{{start_offset}}", "partition_by": []}}
    assert parse_settings({"archives": [base]}).archives[0].object_suffix == ".jsonl.gz"
    for ext, suffix in (("", ".gz"), (".json", ".json.gz"), (".snappy.parquet", ".snappy.parquet.gz")):
        a = parse_settings({"archives": [{**base, "layout": {**base["layout"], "extension": ext}}]}).archives[0]
        assert a.object_suffix == suffix
    with pytest.raises(Exception, match=r"extension must be '' or up to three .*got 'json'"):
        parse_settings({"archives": [{**base, "layout": {**base["layout"], "extension": "json"}}]})


def test_sasl_and_other_secrets_are_never_copied():
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p\\"w0rd";'
    cfg = {"connector.class": "io.confluent.connect.s3.S3SinkConnector", "topics": "t", "s3.bucket.name": "bkt",
           "flush.size": "1", "format.class": "io.confluent.connect.s3.format.json.JsonFormat",
           "consumer.override.sasl.jaas.config": jaas, "consumer.override.sasl.mechanism": "SCRAM-SHA-512",
           "some.plugin.password": "pw-123", "aws.session.token": "tok-456"}
    text = import_connect(json.dumps(cfg))
    for secret in ('p\\"w0rd', "w0rd", "pw-123", "tok-456"):
        assert secret not in text
    assert "S3_ARCHIVE_KAFKA_SASL_USERNAME and S3_ARCHIVE_KAFKA_SASL_PASSWORD=...   " \
           "(consumer.override.sasl.jaas.config: the secret is not copied here)" in text
    assert "S3_ARCHIVE_KAFKA_SASL_MECHANISM=SCRAM-SHA-512" in text
    assert "some.plugin.password: not copied (a secret)" in text
    msg = refused({**cfg, "flush.size": "many"})
    assert msg == "cannot import flush.size='many': an integer >= 1 is needed"


# --- --take-over --------------------------------------------------------------------------------------------------

def settings_of(cfg: dict | str, **kw):
    return parse_settings(yaml.safe_load(import_connect(cfg if isinstance(cfg, str) else json.dumps(cfg),
                                                        take_over_group=True, **kw)))


def test_take_over_starts_at_the_connectors_group_and_reads_its_objects_back():
    s = settings_of(CONFLUENT_COMPLETE)
    [a] = s.archives
    assert a.start_position.consumer_group == "connect-events-to-s3"
    assert [(f.name, f.topic, f.archive, f.layout, f.format, f.partitioner, f.key_prefix) for f in s.foreign_sources] \
        == [("events_to_s3_events_sink", "events", "events_to_s3", "confluent", "parquet", "time", "topics/"),
            ("events_to_s3_transactions_sink", "transactions", "events_to_s3", "confluent", "parquet", "time",
             "topics/")]
    # the sink's names are read back by the foreign source
    name = "topics/events/year=2024/month=01/day=15/hour=10/events+0+0000000000.snappy.parquet"
    assert foreign_windows(s.foreign_sources[0], [name])[0].start == 0


def test_take_over_maps_each_sinks_objects():
    aiven = settings_of(AIVEN_GUIDE).foreign_sources[0]
    assert (aiven.layout, aiven.prefix, aiven.format, aiven.fields, aiven.compression) == (
        "aiven", "example-s3-sink/", "csv", ["value", "key", "timestamp"], "gzip")
    lenses = settings_of("name=lsink\nconnect.s3.kcql=INSERT INTO b1b:backup SELECT * FROM car_speed STOREAS `JSON` "
                         "PROPERTIES('store.envelope'=true)\n"
                         "value.converter=org.apache.kafka.connect.json.JsonConverter\n"
                         "connect.s3.compression.codec=GZIP\n").foreign_sources[0]
    assert (lenses.layout, lenses.key_prefix, lenses.format, lenses.stores_envelope, lenses.compression,
            lenses.value_encoding, lenses.key_encoding) == ("lenses", "backup/", "json", True, "gzip", "none",
                                                            "base64")
    csv = settings_of("name=c\nconnect.s3.kcql=INSERT INTO b1b SELECT * FROM t STOREAS `CSV_WITHHEADERS`\n")
    assert (csv.foreign_sources[0].format, csv.foreign_sources[0].csv_header) == ("csv", True)
    group = settings_of({**CONFLUENT_COMPLETE["config"], "name": "x", "consumer.override.group.id": "my-group"})
    assert group.archives[0].start_position.consumer_group == "my-group"


def test_take_over_refuses_what_it_cannot_continue():
    def refused_take_over(cfg: dict | str) -> str:
        with pytest.raises(UnsupportedConnectConfig) as e:
            import_connect(cfg if isinstance(cfg, str) else json.dumps(cfg), take_over_group=True)
        return str(e.value)

    assert refused_take_over({k: v for k, v in CONFLUENT_COMPLETE["config"].items()}) == (
        "cannot import name=None: --take-over needs the connector's name: its consumer group is connect-<name> (or "
        "give consumer.override.group.id)")
    regex = {**CONFLUENT_COMPLETE["config"], "name": "n", "topics.regex": "ev.*"}
    del regex["topics"]
    assert "--take-over needs the topics listed" in refused_take_over(regex)


# --- sink-compatible output ---------------------------------------------------------------------------------------

AIVEN = {"connector.class": "io.aiven.kafka.connect.s3.AivenKafkaConnectS3SinkConnector", "topics": "orders",
         "aws.s3.bucket.name": "bkt"}


def test_aiven_value_encoding_none_and_dated_prefixes():
    a = one({**AIVEN, "format.output.type": "jsonl", "format.output.fields": "key,value,offset",
             "format.output.fields.value.encoding": "none", "aws.s3.prefix": "raw/{{utc_date}}/"})
    assert (a.sink_output.value, a.prefix, a.restorable) == ("json", "raw/", False)
    # the date directory is the record's date (UTC), in front of the sink's template
    assert key(a, "orders", timestamp_us=1_705_363_199_000_000) == "raw/2024-01-15/orders-3-1000.gz"
    c = one({**AIVEN, "format.output.fields": "offset,value", "format.output.fields.value.encoding": "none",
             "aws.s3.prefix": "p-{{local_date}}", "file.name.timestamp.timezone": "Europe/Berlin"})
    assert (c.sink_output.value, c.prefix, c.layout.timezone) == ("text", "", "Europe/Berlin")
    assert key(c, "orders", timestamp_us=1_705_363_199_000_000) == "p-2024-01-16orders-3-1000.gz"
    # value.encoding none with value not last: values stay base64 (a raw one could hold commas)
    text = import_connect(json.dumps({**AIVEN, "format.output.fields": "value,offset",
                                      "format.output.fields.value.encoding": "none"}))
    assert "values stay base64" in text and "sink_output" not in text.split("archives:")[1].split("#")[0]


def test_confluent_and_lenses_tombstones_levels_and_brotli():
    conf = {**CONFLUENT_COMPLETE["config"], "behavior.on.null.values": "ignore", "parquet.codec": "brotli"}
    a = one(conf)
    assert (a.sink_output.skip_tombstones, a.compression, a.layout.extension) == (True, "brotli", ".br.parquet")
    j = one({"connector.class": "io.confluent.connect.s3.S3SinkConnector", "topics": "t", "s3.bucket.name": "bkt",
             "flush.size": "10", "format.class": "io.confluent.connect.s3.format.json.JsonFormat",
             "s3.compression.type": "gzip", "s3.compression.level": "9"})
    assert (j.compression, j.compression_level) == ("gzip", 9)
    assert refused({**conf, "behavior.on.null.values": "drop"}) == (
        "cannot import behavior.on.null.values='drop': allowed: fail, ignore, write")
    lenses = one("name=l\nconnect.s3.kcql=INSERT INTO b1b:p SELECT * FROM t STOREAS `PARQUET`\n"
                 "connect.s3.compression.codec=BROTLI\nconnect.s3.compression.level=9\n"
                 "connect.s3.skip.null.values=true\n")
    assert (lenses.compression, lenses.compression_level, lenses.sink_output.skip_tombstones) == ("brotli", 9, True)
    csv_headers = one("INSERT INTO b1b:p SELECT * FROM t STOREAS `CSV_WITHHEADERS`")
    assert csv_headers.sink_output.csv_header and csv_headers.restorable is False
