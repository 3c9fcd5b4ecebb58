import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from s3_archive.keys.objects import (
    manifest_key,
    manifest_prefix,
    object_key,
    partition_dir,
    staging_prefix,
    window_object_stem,
)
from s3_archive.keys.template import MAX_PART
from s3_archive.model.formats import FORMATS
from s3_archive.model.windows import MAX_OFFSET, MAX_PARTITION, OffsetWindow

FAST = settings(max_examples=100, deadline=None)

W = OffsetWindow
SUFFIXES = sorted({spec.object_suffix(c) for spec in FORMATS.values() for c in spec.codecs})

# Valid Kafka topic names (what settings accept), with the layout's own directory names thrown in.
topics = st.one_of(
    st.sampled_from(["orders", "_manifests", "_staging", "kafka_partition", "a", "a.b", "orders-v2", "..."]),
    st.from_regex(r"[a-zA-Z0-9._-]{1,20}", fullmatch=True).filter(lambda t: t not in (".", "..")),
)
prefixes = st.sampled_from(["", "raw/", "a/b/", "_manifests/", "_staging/", "orders/", "x"])
partitions = st.integers(0, MAX_PARTITION)
parts = st.integers(0, 9999)
suffixes = st.sampled_from(SUFFIXES)


@st.composite
def windows(draw, partition=partitions, max_offset=MAX_OFFSET):
    p = draw(partition)
    start = draw(st.integers(0, max_offset - 1))
    return W(p, start, draw(st.integers(start + 1, max_offset)))


# --- the documented layout ---------------------------------------------------------------------------------------


def test_keys_of_a_known_window():
    w = W(3, 1000, 2000)
    assert partition_dir("arch/", "orders", 3) == "arch/orders/kafka_partition=3/"
    assert window_object_stem("arch/", "orders", w) == \
        "arch/orders/kafka_partition=3/orders+3+0000000000000001000-0000000000000002000+"
    assert object_key("arch/", "orders", w, 0, ".parquet") == \
        "arch/orders/kafka_partition=3/orders+3+0000000000000001000-0000000000000002000+00000.parquet"
    assert object_key("arch/", "orders", w, 12, ".jsonl.gz") == \
        "arch/orders/kafka_partition=3/orders+3+0000000000000001000-0000000000000002000+00012.jsonl.gz"
    assert manifest_key("arch/", "orders", w) == \
        "arch/_manifests/orders/kafka_partition=3/p00003-0000000000000001000-0000000000000002000.json"
    assert manifest_prefix("arch/", "orders") == "arch/_manifests/orders/"
    assert staging_prefix("arch/", "orders", w) == \
        "arch/_staging/orders/p00003-0000000000000001000-0000000000000002000/"
    assert staging_prefix("arch/", "orders", w, "run-1") == \
        "arch/_staging/orders/p00003-0000000000000001000-0000000000000002000/run-1/"


def test_empty_prefix_puts_topics_at_bucket_root():
    w = W(0, 0, 10)
    assert object_key("", "t", w, 0, ".parquet") == "t/kafka_partition=0/t+0+0000000000000000000-0000000000000000010+00000.parquet"
    assert manifest_key("", "t", w) == "_manifests/t/kafka_partition=0/" + w.key + ".json"
    assert staging_prefix("", "t", w) == "_staging/t/" + w.key + "/"


def test_directory_is_kafka_partition_not_partition():
    # Hive-style readers reject a directory partition column that repeats the data column `partition`
    key = object_key("", "t", W(5, 0, 10), 0, ".parquet")
    assert "/kafka_partition=5/" in key
    assert "/partition=" not in key


@FAST
@given(prefixes, topics, windows(), parts, suffixes)
def test_object_key_is_under_its_partition_directory(prefix, topic, w, part, suffix):
    key = object_key(prefix, topic, w, part, suffix)
    d = partition_dir(prefix, topic, w.partition)
    assert d == f"{prefix}{topic}/kafka_partition={w.partition}/"
    assert key.startswith(d)
    name = key[len(d):]
    assert "/" not in name  # directly in it, no deeper
    assert name == f"{topic}+{w.partition}+{w.start:019d}-{w.end:019d}+{part:05d}{suffix}"
    assert key.endswith(suffix)


def test_rerun_of_a_window_writes_the_same_keys():
    w = W(1, 500, 600)
    assert object_key("p/", "t", w, 2, ".parquet") == object_key("p/", "t", W(1, 500, 600), 2,
                                                                                 ".parquet")


# --- order -------------------------------------------------------------------------------------------------------


@st.composite
def consecutive_windows(draw):
    p = draw(st.integers(0, 200))
    start = draw(st.integers(0, 10**15))
    out = []
    for size in draw(st.lists(st.integers(1, 10**6), min_size=1, max_size=10)):
        out.append(W(p, start, start + size))
        start += size
    return out


@FAST
@given(prefixes, topics, consecutive_windows(), st.lists(st.integers(1, 30), min_size=10, max_size=10), suffixes)
def test_keys_of_one_partition_sort_in_offset_order(prefix, topic, ws, n_parts, suffix):
    # (window start, part) is the offset order of the objects of one partition
    in_offset_order = [object_key(prefix, topic, w, i, suffix) for w, n in zip(ws, n_parts) for i in range(n)]
    assert sorted(in_offset_order) == in_offset_order
    assert len(set(in_offset_order)) == len(in_offset_order)


@FAST
@given(prefixes, topics, partitions, st.lists(st.tuples(st.integers(0, MAX_OFFSET - 1), parts), min_size=2,
                                              max_size=20, unique=True), suffixes)
def test_key_order_is_start_then_part_order(prefix, topic, p, starts_parts, suffix):
    keyed = {object_key(prefix, topic, W(p, s, s + 1), part, suffix): (s, part) for s, part in starts_parts}
    assert [keyed[k] for k in sorted(keyed)] == sorted(starts_parts)


def test_part_order_holds_up_to_the_largest_part_and_beyond_is_refused():
    # A window split into many objects (max_records_per_object small compared to flush.count):
    # part 10000 must still sort after part 9999, and a part number that would break the order is refused.
    w = W(0, 0, 10**6)
    keys = [object_key("", "t", w, i, ".parquet") for i in (9, 9999, 10000, MAX_PART)]
    assert sorted(keys) == keys
    with pytest.raises(ValueError, match=f"part number must be in 0..{MAX_PART}, got {MAX_PART + 1}"):
        object_key("", "t", w, MAX_PART + 1, ".parquet")


# --- the window's stem -------------------------------------------------------------------------------------------


@FAST
@given(prefixes, topics, windows(), st.lists(parts, min_size=1, max_size=5), suffixes)
def test_stem_is_prefix_of_all_the_window_keys(prefix, topic, w, ps, suffix):
    stem = window_object_stem(prefix, topic, w)
    assert stem.startswith(partition_dir(prefix, topic, w.partition))
    for part in ps:
        assert object_key(prefix, topic, w, part, suffix).startswith(stem)


@FAST
@given(prefixes, topics, windows(), windows(), parts, suffixes)
@example("", "t", W(0, 0, 10), W(0, 0, 20), 0, ".parquet")  # two windows that share a start offset
def test_stem_is_prefix_of_no_other_window_keys(prefix, topic, a, b, part, suffix):
    assume(a != b)
    stem = window_object_stem(prefix, topic, a)
    assert not object_key(prefix, topic, b, part, suffix).startswith(stem)


@FAST
@given(prefixes, topics, windows(), windows(), parts, suffixes)
def test_stem_is_prefix_of_no_other_start_keys(prefix, topic, a, b, part, suffix):
    # windows of a partition that do not share a start offset (always so for non-overlapping windows)
    assume((a.partition, a.start) != (b.partition, b.start))
    stem = window_object_stem(prefix, topic, a)
    assert not object_key(prefix, topic, b, part, suffix).startswith(stem)


@FAST
@given(prefixes, partitions, st.sampled_from(["a", "ab", "a.b", "a-b"]),
       st.integers(0, 10**6), st.integers(0, 10**6))
def test_stem_starts_do_not_collide_for_prefix_related_numbers(prefix, p, topic, s1, s2):
    # partitions 1 and 10, offsets 1 and 10: fixed width and the trailing '+' keep stems apart
    assume(s1 != s2)
    sa = window_object_stem(prefix, topic, W(p, s1, s1 + 1))
    sb = window_object_stem(prefix, topic, W(p, s2, s2 + 1))
    assert not sa.startswith(sb) and not sb.startswith(sa)


def test_stems_of_related_topics_do_not_collide():
    w = W(1, 0, 10)
    ab = object_key("", "ab", w, 0, ".parquet")
    assert not ab.startswith(window_object_stem("", "a", w))
    assert not ab.startswith(partition_dir("", "a", 1))
    p1 = object_key("", "a", W(1, 0, 10), 0, ".parquet")
    p10 = object_key("", "a", W(10, 0, 10), 0, ".parquet")
    assert not p10.startswith(partition_dir("", "a", 1))
    assert not p1.startswith(partition_dir("", "a", 10))


# --- manifests and staging never mix with data -------------------------------------------------------------------


@FAST
@given(prefixes, topics, topics, windows(), partitions, st.text(alphabet="abc-0123456789", min_size=1, max_size=12))
def test_manifest_and_staging_keys_never_under_a_data_directory(prefix, topic, other_topic, w, p, attempt):
    data_dir = partition_dir(prefix, other_topic, p)
    for key in (manifest_key(prefix, topic, w), manifest_prefix(prefix, topic),
                staging_prefix(prefix, topic, w), staging_prefix(prefix, topic, w, attempt)):
        assert not key.startswith(data_dir), (key, data_dir)


@pytest.mark.parametrize("topic", ["_manifests", "_staging"])
def test_topics_named_like_the_layout_dirs_stay_apart(topic):
    w = W(0, 0, 10)
    data = object_key("p/", topic, w, 0, ".parquet")
    for t in ("orders", topic):
        assert not data.startswith(manifest_prefix("p/", t) + "kafka_partition=0/x")
        assert not data.startswith(staging_prefix("p/", t, w))
        assert not manifest_key("p/", t, w).startswith(partition_dir("p/", topic, 0))
        assert not staging_prefix("p/", t, w).startswith(partition_dir("p/", topic, 0))


@FAST
@given(prefixes, topics, topics, windows(), parts, suffixes)
def test_data_keys_never_under_manifest_or_staging_prefixes(prefix, topic, other_topic, w, part, suffix):
    key = object_key(prefix, topic, w, part, suffix)
    assert not key.startswith(manifest_prefix(prefix, other_topic))
    assert not key.startswith(staging_prefix(prefix, other_topic, w))


@FAST
@given(prefixes, topics, windows())
def test_manifest_key_under_manifest_prefix(prefix, topic, w):
    key = manifest_key(prefix, topic, w)
    assert key.startswith(manifest_prefix(prefix, topic))
    assert key.endswith(f"/kafka_partition={w.partition}/{w.key}.json")
    # the window is recoverable from its manifest key
    assert OffsetWindow.parse(key.rsplit("/", 1)[1].removesuffix(".json")) == w


@FAST
@given(prefixes, topics, topics, windows())
def test_manifest_prefixes_of_different_topics_are_disjoint(prefix, a, b, w):
    assume(a != b)
    assert not manifest_key(prefix, b, w).startswith(manifest_prefix(prefix, a))
    assert not staging_prefix(prefix, b, w).startswith(staging_prefix(prefix, a, w))


@FAST
@given(prefixes, topics, windows(), windows())
def test_manifest_and_staging_distinct_per_window(prefix, topic, a, b):
    assume(a != b)
    assert manifest_key(prefix, topic, a) != manifest_key(prefix, topic, b)
    sa, sb = staging_prefix(prefix, topic, a), staging_prefix(prefix, topic, b)
    assert not sa.startswith(sb) and not sb.startswith(sa)


@FAST
@given(prefixes, topics, windows(), st.text(alphabet="abcdef0123456789-_", min_size=1, max_size=40))
def test_staging_with_attempt_is_under_staging_without(prefix, topic, w, attempt):
    base = staging_prefix(prefix, topic, w)
    with_attempt = staging_prefix(prefix, topic, w, attempt)
    assert base.endswith("/")
    assert with_attempt.endswith("/")
    assert with_attempt.startswith(base)
    assert with_attempt != base
    assert with_attempt[len(base):] == attempt + "/"


@FAST
@given(prefixes, topics, windows(), st.text(alphabet="abc0123", min_size=1, max_size=6),
       st.text(alphabet="abc0123", min_size=1, max_size=6))
def test_attempts_do_not_nest(prefix, topic, w, a1, a2):
    assume(a1 != a2)
    s1 = staging_prefix(prefix, topic, w, a1)
    s2 = staging_prefix(prefix, topic, w, a2)
    assert not s1.startswith(s2) and not s2.startswith(s1)
