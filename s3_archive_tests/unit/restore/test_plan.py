"""Pure parts of the restore: murmur2, partition mapping, filters, the ledger, record decoding."""

import base64
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from s3_archive.model.errors import InvalidRestore, RestoreFailed
from s3_archive.model.windows import OffsetWindow
from s3_archive.restore.ledger import RangeSet, decode_ledger, encode_ledger
from s3_archive.restore.readers import jsonl_records, parquet_records
from s3_archive.restore.request import Filters, RestoreRequest, ledger_id
from s3_archive.restore.routing import PartitionMapping, murmur2, murmur2_partition, to_positive

# Computed with org.apache.kafka.common.utils.Utils.murmur2 from kafka-clients 4.1.1 (the first six are also
# Kafka's own UtilsTest vectors).
KAFKA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
    (b"", 275646681),
    (b"a", -1563381124),
    (b"ab", 316155434),
    (b"abcd", -1323649548),
    (b"abcde", 461995741),
    (bytes([0x00, 0xFF, 0x80, 0x7F, 0xFE]), 1617215701),
]


@pytest.mark.parametrize("data,expected", KAFKA_MURMUR2)
def test_murmur2_matches_kafka_utils(data, expected):
    assert murmur2(data) == expected


def test_to_positive_clears_the_sign_bit_like_java():
    assert to_positive(-973932308) == 1173551340
    assert to_positive(-(2**31)) == 0  # Math.abs would overflow here; toPositive does not
    assert to_positive(5) == 5


@given(st.binary(max_size=64), st.integers(1, 500))
def test_murmur2_partition_is_in_range(key, n):
    assert 0 <= murmur2_partition(key, n) < n
    assert -(2**31) <= murmur2(key) < 2**31


def test_same_mapping():
    m = PartitionMapping.parse("same")
    assert m.target(3, b"k", 8) == 3
    m.check([0, 3, 7], 8, "t")
    with pytest.raises(InvalidRestore, match="source partition 8 has no same-numbered partition in target topic 't' "
                                             r"\(8 partitions\)"):
        m.check([0, 8], 8, "t")


def test_murmur2_mapping_hashes_keys_and_keeps_null_keys_deterministic():
    m = PartitionMapping.parse("murmur2")
    assert m.target(0, b"21", 6) == 1173551340 % 6
    assert m.target(7, None, 3) == 7 % 3  # never random: a re-run must route every record the same way
    m.check(range(100), 3, "t")  # any source partition can go anywhere


def test_explicit_map():
    m = PartitionMapping.parse("map", {"0": 2, "1": 2, "2": 0})
    assert m.explicit == ((0, 2), (1, 2), (2, 0))
    assert [m.target(s, None, 3) for s in (0, 1, 2)] == [2, 2, 0]
    with pytest.raises(InvalidRestore, match=r"partition_map has no entry for source partition 3; it maps only "
                                             r"\[0, 1, 2\]"):
        m.check([0, 3], 3, "t")
    with pytest.raises(InvalidRestore, match="sends source partition 0 to partition 2, but target topic 't' has 2 "
                                             "partitions"):
        m.check([0], 2, "t")


@pytest.mark.parametrize("mode,mapping,message", [
    ("random", None, "partition_mapping must be one of same, murmur2, map; got 'random'"),
    ("map", {}, "partition_mapping: map needs partition_map"),
    ("murmur2", {"0": 1}, "partition_map is only used with partition_mapping: map"),
    ("map", {"x": 1}, "partition_map entries must be partition numbers, got 'x': 1"),
    ("map", {"0": -1}, "partition_map entries must be >= 0, got '0': -1"),
    ("map", {"0": 1, "00": 2}, "names a source partition twice"),
])
def test_bad_mappings_are_named(mode, mapping, message):
    with pytest.raises(InvalidRestore, match=message):
        PartitionMapping.parse(mode, mapping)


@pytest.mark.parametrize("mode,mapping", [("same", None), ("murmur2", None), ("map", {"0": 1, "1": 0, "2": 1})])
@given(sp=st.integers(0, 2), key=st.one_of(st.none(), st.binary(max_size=16)))
def test_compiled_mapping_equals_target(mode, mapping, sp, key):
    m = PartitionMapping.parse(mode, mapping)
    assert m.compiled(3)(sp, key) == m.target(sp, key, 3)


def test_offset_scope_clips_the_window():
    w = OffsetWindow(0, 100, 200)
    assert Filters().offset_scope(w) == (100, 200)
    assert Filters(from_offset=150).offset_scope(w) == (150, 200)
    assert Filters(to_offset=120).offset_scope(w) == (100, 120)
    assert Filters(from_offset=120, to_offset=130).offset_scope(w) == (120, 130)
    assert Filters(from_offset=200).offset_scope(w) is None
    assert Filters(to_offset=100).offset_scope(w) is None


def test_time_filter_is_half_open():
    f = Filters(from_timestamp_ms=1000, to_timestamp_ms=2000)
    assert [f.time_ok(t) for t in (999, 1000, 1999, 2000)] == [False, True, True, False]
    assert Filters().time_ok(-5)
    assert Filters(to_timestamp_ms=10).time_ok(9) and not Filters(to_timestamp_ms=10).time_ok(10)


def test_time_filter_prunes_windows_by_manifest_timestamps():
    f = Filters(from_timestamp_ms=1000, to_timestamp_ms=2000)
    assert not f.time_may_match(0, 999)
    assert f.time_may_match(0, 1000)
    assert f.time_may_match(1999, 5000)
    assert not f.time_may_match(2000, 5000)
    assert f.time_may_match(None, None)  # an empty window: nothing to read anyway
    assert Filters().time_may_match(0, 1)


@pytest.mark.parametrize("kw,message", [
    ({"from_offset": -1}, "from_offset must be >= 0, got -1"),
    ({"from_offset": 5, "to_offset": 5}, r"from_offset \(5\) must be < to_offset \(5\)"),
    ({"from_timestamp_ms": 9, "to_timestamp_ms": 3}, r"from_timestamp_ms \(9\) must be < to_timestamp_ms \(3\)"),
])
def test_bad_filters_are_named(kw, message):
    with pytest.raises(InvalidRestore, match=message):
        Filters(**kw)


def test_restoring_into_the_source_topic_needs_the_flag():
    with pytest.raises(InvalidRestore, match="target topic 'orders' is the archived topic itself.*allow_source_topic"):
        RestoreRequest("orders", "orders")
    assert RestoreRequest("orders", "orders", allow_source_topic=True).target_topic == "orders"
    with pytest.raises(InvalidRestore, match="target_topic is required"):
        RestoreRequest("orders", "")
    with pytest.raises(InvalidRestore, match="transaction_records must be >= 1, got 0"):
        RestoreRequest("orders", "copy", transaction_records=0)


def test_ledger_id_separates_time_filtered_restores_only():
    assert ledger_id("a", "b", Filters()) == "s3-archive-restore.a.b"
    # An offset filter only narrows what is recorded, so it shares the ledger of the unfiltered restore.
    assert ledger_id("a", "b", Filters(from_offset=5, to_offset=9)) == "s3-archive-restore.a.b"
    assert ledger_id("a", "b", Filters(from_timestamp_ms=1, to_timestamp_ms=2)) == "s3-archive-restore.a.b.t1-2"
    assert ledger_id("a", "b", Filters(to_timestamp_ms=2)) == "s3-archive-restore.a.b.t-2"


def test_range_set_merges_touching_and_overlapping_ranges():
    rs = RangeSet()
    rs.add(10, 20)
    rs.add(30, 40)
    assert rs.ranges() == [[10, 20], [30, 40]]
    rs.add(20, 30)  # touches both
    assert rs.ranges() == [[10, 40]]
    rs.add(0, 5)
    rs.add(3, 12)
    assert rs.ranges() == [[0, 40]]
    rs.add(50, 50)  # empty: ignored
    assert rs.ranges() == [[0, 40]] and rs.size() == 40
    assert 0 in rs and 39 in rs and 40 not in rs and -1 not in rs


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=12))
def test_range_set_equals_a_set_of_offsets(adds):
    rs, model = RangeSet(), set()
    for a, n in adds:
        rs.add(a, a + n)
        model |= set(range(a, a + n))
    assert {x for x in range(-1, 90) if x in rs} == model
    assert rs.size() == len(model)
    flat = [x for r in rs.ranges() for x in r]
    assert flat == sorted(flat) and all(b < c for (_, b), (c, _) in zip(rs.ranges(), rs.ranges()[1:]))


def test_ledger_round_trips_through_committed_offset_metadata():
    ledger = {0: RangeSet([[0, 100]]), 1: RangeSet([[0, 10], [20, 30]]), 4: RangeSet([[5, 6]])}
    entries = encode_ledger("src", ledger, 3, [0, 1, 2])
    assert sorted(entries) == [0, 1, 2]
    assert entries[1][0] == 10 + 10 + 1  # buckets 1: source partitions 1 and 4
    assert json.loads(entries[1][1]) == {"v": 1, "source": "src", "ranges": {"1": [[0, 10], [20, 30]], "4": [[5, 6]]}}
    assert entries[2] == (0, '{"v":1,"source":"src","ranges":{}}')
    assert decode_ledger("src", [m for _, m in entries.values()] + [None, ""]) == ledger


def test_ledger_entries_from_before_the_target_grew_are_merged():
    old = encode_ledger("src", {3: RangeSet([[0, 50]])}, 2, [1])[1][1]  # 3 % 2 == 1
    new = encode_ledger("src", {3: RangeSet([[50, 80]])}, 4, [3])[3][1]  # 3 % 4 == 3
    assert decode_ledger("src", [old, new]) == {3: RangeSet([[0, 80]])}


def test_a_foreign_or_overfull_ledger_fails_clearly():
    with pytest.raises(RestoreFailed, match="is not an s3-archive ledger for source 'src'"):
        decode_ledger("src", ['{"v": 1, "source": "other", "ranges": {}}'])
    with pytest.raises(RestoreFailed, match="not an s3-archive ledger"):
        decode_ledger("src", ["some consumer's metadata"])
    fragmented = {0: RangeSet([[i * 10, i * 10 + 1] for i in range(400)])}
    with pytest.raises(RestoreFailed, match=r"source partitions \[0\] no longer fits"):
        encode_ledger("src", fragmented, 1, [0])


def _spark_like_table(ts_type: pa.DataType) -> pa.Table:
    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    return pa.table({
        "key": pa.array([b"\x00k", None, b""], pa.binary()),
        "value": pa.array([b"v", None, b""], pa.binary()),
        "headers": pa.array([[{"key": "d", "value": b"1"}, {"key": "d", "value": None}], [], None], headers),
        "topic": ["t"] * 3,
        "partition": pa.array([2, 2, 2], pa.int32()),
        "offset": pa.array([7, 8, 10], pa.int64()),
        "timestamp": pa.array([1_700_000_000_123_000, 1_000, 0], pa.timestamp("us", tz="UTC")).cast(ts_type),
        "timestamp_type": pa.array([0, 0, 0], pa.int32()),
    })


@pytest.mark.parametrize("ts_type", [pa.timestamp("us", tz="UTC"), pa.timestamp("ms", tz="UTC"),
                                     pa.timestamp("ns")])
def test_parquet_records_decode_the_envelope(ts_type):
    buf = io.BytesIO()
    pq.write_table(_spark_like_table(ts_type), buf)
    buf.seek(0)
    recs = list(parquet_records(buf))
    assert [(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in recs] == [
        (2, 7, b"\x00k", b"v", [("d", b"1"), ("d", None)], 1_700_000_000_123),
        (2, 8, None, None, [], 1),
        (2, 10, b"", b"", [], 0),
    ]


def test_jsonl_records_decode_base64_and_iso_timestamps():
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    lines = [
        {"key": b64(b"\xff"), "value": None, "headers": [{"key": "n", "value": None}, {"key": "n", "value": b64(b"")}],
         "topic": "t", "partition": 0, "offset": 1, "timestamp": "2023-11-14T22:13:20.123000Z", "timestamp_type": 0},
        {"key": None, "value": b64(b"x" * 3), "headers": None, "topic": "t", "partition": 0, "offset": 2,
         "timestamp": "1970-01-01T00:00:00.001000+00:00", "timestamp_type": 0},
    ]
    data = ("\n".join(json.dumps(x) for x in lines) + "\n\n").encode()
    recs = list(jsonl_records(io.BytesIO(data)))
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in recs] == [
        (1, b"\xff", None, [("n", None), ("n", b"")], 1_700_000_000_123),
        (2, None, b"xxx", [], 1),
    ]


def test_jsonl_lines_split_across_reads():
    from s3_archive.restore.readers import _lines

    data = b"a\nbb\n\nccc"
    assert list(_lines(io.BytesIO(data), chunk=2)) == [b"a", b"bb", b"", b"ccc"]


def test_dagster_config_becomes_a_request():
    from s3_archive.defs.restore.config import RestoreConfig

    req = RestoreConfig(target_topic="copy", partition_mapping="map", partition_map={"0": 1, "1": 0},
                        from_offset=10, to_timestamp_ms=99, provenance_headers=True).request("orders")
    assert req.mapping == PartitionMapping("map", ((0, 1), (1, 0)))
    assert req.filters == Filters(None, 99, 10, None)
    assert (req.source_topic, req.target_topic, req.provenance_headers, req.dry_run) == ("orders", "copy", True, False)
    assert req.ledger_id == "s3-archive-restore.orders.copy.t-99"
    with pytest.raises(InvalidRestore, match="is the archived topic itself"):
        RestoreConfig(target_topic="orders").request("orders")


def test_restore_assets_share_the_archive_partitions_and_depend_on_the_archive():
    from s3_archive.config.settings import parse_settings
    from s3_archive.defs.archive.partitions import archive_asset_key, window_partitions
    from s3_archive.defs.restore.assets import build_restore_defs

    settings = parse_settings({"archives": [{"name": "a", "topics": ["t1", "t2"], "bucket": "bkt"}]})
    defs = build_restore_defs(settings)
    assets = {a.key.to_user_string(): a for a in defs.assets}
    assert sorted(assets) == ["kafka_restore/t1", "kafka_restore/t2"]
    a = assets["kafka_restore/t1"]
    assert a.partitions_def == window_partitions("t1")
    assert archive_asset_key("t1") in a.dependency_keys
