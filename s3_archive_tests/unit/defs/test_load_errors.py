"""Every refusal when definitions load is one `InvalidConfig` in the config's format, naming the key path(s) of the
file as written (not of the config once topic patterns are resolved)."""

from contextlib import nullcontext

import pytest

from s3_archive.config.settings import parse_settings
from s3_archive.definitions import build_defs
from s3_archive.model.errors import InvalidConfig


def archive(name: str, prefix: str, **kw) -> dict:
    return {"name": name, "bucket": "bkt", "prefix": prefix, **kw}


# An archive whose pattern knows no topic yet comes first: it has no definitions, but it keeps its place.
IDLE = archive("idle", "idle/", topic_pattern=r"idle\..*")


@pytest.mark.parametrize("archives, known, message", [
    ([archive("outer", "", topics=["x"]), archive("inner", "x/", topics=["t"])], {},
     "archives[1].prefix: 'x/' (archive 'inner') overlaps archives[0].prefix '' (archive 'outer') in bucket bkt: "
     "the lifecycle rule of 'outer' over s3://bkt/x/ (the data of topic 'x') would act on s3://bkt/x/_staging/ (the "
     "staging objects of 'inner'); give the archives prefixes that do not contain each other"),
    ([IDLE, archive("one", "a/", topics=["a.b"]), archive("two", "b/", topics=["c", "a_b"])], {},
     "archives[2].topics[1]: topic 'a_b' maps to the Glue table s3_archive.a_b, as does topic 'a.b' "
     "(archives[1].topics[0]); set another catalog.table_prefix or catalog.database in one of the two archives"),
    ([IDLE, archive("one", "a/", topics=["a.b"]), archive("two", "b/", topic_pattern=r"a_.*")], {"two": ["a_b"]},
     "archives[2].topic_pattern: topic 'a_b' maps to the Glue table s3_archive.a_b, as does topic 'a.b' "
     "(archives[1].topics[0]); set another catalog.table_prefix or catalog.database in one of the two archives"),
    ([archive("one", "a/", topics=["a.b", "a_b"])], {},
     "archives[0].topics[1]: topic 'a_b' maps to the Glue table s3_archive.a_b, as does topic 'a.b' "
     "(archives[0].topics[0]); topics of one archive share its catalog options: archive one of them in another "
     "archive"),
    ([IDLE, archive("one", "a/", topics=["t"], catalog={"partitions": "projection"}, layout={
        "template": "{{topic}}/{{partition_by}}/{{topic}}-{{partition}}-{{start_offset}}",
        "partition_by": [{"kind": "time", "path_format": "'dt'=yyyy-MM-dd"}]})], {},
     "archives[1].catalog.partitions: archive 'one': catalog partitions 'projection' cannot describe the layout's "
     "partition keys (dt); only kafka_partition alone can be projected"),
    ([IDLE, archive("one", "a/", topics=["t" * 200], catalog={"table_prefix": "p" * 60})], {},
     f"archives[1].topics[0]: table name for topic {'t' * 200!r} is 260 characters; Glue allows 255 "
     "(catalog.table_prefix + topic)"),
])
def test_a_refusal_at_load_is_one_config_error_naming_the_key_paths(archives, known, message):
    settings = parse_settings({"archives": archives})
    with pytest.warns(UserWarning, match="knows no topic yet: idle") if archives[0] is IDLE else nullcontext():
        with pytest.raises(InvalidConfig) as e:
            build_defs(settings, known)
    assert str(e.value).startswith("invalid s3-archive config:\n  " + message)

