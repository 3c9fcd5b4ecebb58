"""The exactly-once commit of one window: staging -> deterministic final keys -> manifest (the commit point).

    1. Spark wrote the window to  _staging/<topic>/<window>/<attempt>/  (see write.py).
    2. Each staged part is copied server-side (CopyObject) to its final key, a pure function of the window and
       the part number, so every attempt writes the same keys.
    3. Data objects of the window that this attempt does not write (left by an earlier attempt with more parts)
       are deleted.
    4. The manifest is written with `If-None-Match: *`: the first attempt to get there commits; any other gets
       412 and adopts the committed manifest. It rewrote the same keys with the same records, so each record is
       still stored once.
    5. Staging of every attempt of the window is deleted.

A crash anywhere before 4 leaves no manifest: the next attempt redoes 2-5 over the same keys. A crash after 4
leaves a committed window whose stale staging the next attempt (or the staging lifecycle rule) removes.
`fault` lets tests stop the protocol after any step.

"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from s3_archive.io.s3 import delete_keys, error_code, list_objects, read_manifest
from s3_archive.keys.buckets import BUCKET_COLUMN, bucket_from_staging_dir
from s3_archive.keys.layout import OutputLayout
from s3_archive.keys.objects import (
    dead_letter_key,
    dead_letter_stem,
    manifest_key,
    object_key,
    parse_object_key,
    record_object_key,
    staging_prefix,
    window_object_stem,
    window_scan_prefix,
)
from s3_archive.model.errors import ArchiveIntegrityError
from s3_archive.model.manifest import Manifest, ManifestObject
from s3_archive.model.windows import OffsetWindow

Fault = Callable[[str], None]


def no_fault(step: str) -> None:
    return None


_PART_DIR = re.compile(r"(?:^|/)_part=(\d+)/")


def staged_parts(s3: Any, bucket: str, staging: str) -> list[dict]:
    """Spark's output files under one attempt's staging prefix, in part order: the bucket directory of a
    layout with partition_by, the `_part=<n>/` directory of a rotated write (numerically), then task, then file
    counter. Each gets `bucket`: the record bucket it holds (None without a bucket directory)."""
    parts = [o for o in list_objects(s3, bucket, staging)
             if not o["Key"].endswith("/") and o["Key"].rsplit("/", 1)[-1].startswith("part-")]
    for o in parts:
        rel = o["Key"][len(staging):]
        first = rel.split("/", 1)[0]
        o["bucket"] = (bucket_from_staging_dir(first, BUCKET_COLUMN) if first.startswith(BUCKET_COLUMN + "=")
                       else None)
        m = _PART_DIR.search(rel)
        o["part_dir"] = int(m.group(1)) if m else 0

    return sorted(parts, key=lambda o: (o["bucket"] or "", o["part_dir"], o["Key"]))


def final_keys(parts: list[dict], key_for: Callable[[str | None, int], str]) -> list[str]:
    """The final key of each staged part: parts are numbered 0.. within each bucket, in staged_parts order."""
    counters: dict[str | None, int] = {}
    keys = []
    for p in parts:
        n = counters.get(p["bucket"], 0)
        counters[p["bucket"]] = n + 1
        keys.append(key_for(p["bucket"], n))
    shared = sorted(k for k, n in Counter(keys).items() if n > 1)
    if shared:  # e.g. a template without {{part}} and a bucket Spark wrote as two files
        raise ArchiveIntegrityError(f"staged parts would share final keys: {shared[:3]}; add {{{{part}}}} to the "
                                    "layout template")
    return keys


def _copy(s3: Any, bucket: str, source: str, final: str) -> dict:
    r = s3.copy_object(Bucket=bucket, Key=final, CopySource={"Bucket": bucket, "Key": source})
    return {"key": final, "etag": r["CopyObjectResult"]["ETag"].strip('"')}


def publish_compressed(s3: Any, bucket: str, source: str, final: str, codec: str) -> dict:
    """A staged (uncompressed) part, compressed with `codec` on its way to its final key: streamed through temp
    files, so memory stays flat whatever the part's size. Returns the final object's key, size and ETag."""
    import shutil
    import tempfile

    from backports import zstd

    if codec != "zstd":
        raise ValueError(f"no publish-time codec {codec!r}; supported: zstd")
    with tempfile.TemporaryDirectory() as tmp:
        raw, packed = f"{tmp}/raw", f"{tmp}/packed"
        s3.download_file(bucket, source, raw)
        with open(raw, "rb") as src, zstd.open(packed, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        with open(packed, "rb") as f:
            size = f.seek(0, 2)
            f.seek(0)
            r = s3.put_object(Bucket=bucket, Key=final, Body=f)
    return {"key": final, "etag": r["ETag"].strip('"'), "size": size}


def publish_records(s3: Any, bucket: str, parts: list[dict], key_for: Callable[[int], str],
                    threads: int = 16) -> list[ManifestObject]:
    """The `bytes` format: each staged record (parquet: offset, value) becomes one object holding its value,
    at a key made from its offset. Streams the staged parts through a temp file, a row group at a time."""
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq

    def put(offset: int, value: bytes | None) -> ManifestObject:
        body = value or b""
        r = s3.put_object(Bucket=bucket, Key=key_for(offset), Body=body)
        return ManifestObject(key=key_for(offset), size=len(body), etag=r["ETag"].strip('"'), offset=offset)

    objects: list[ManifestObject] = []
    with ThreadPoolExecutor(max_workers=threads) as pool, tempfile.TemporaryDirectory() as tmp:
        for part in parts:
            local = f"{tmp}/part.parquet"
            s3.download_file(bucket, part["Key"], local)
            for batch in pq.ParquetFile(local).iter_batches(batch_size=256, columns=["offset", "value"]):
                objects += pool.map(put, batch.column("offset").to_pylist(), batch.column("value").to_pylist())
    return sorted(objects, key=lambda o: o.offset)


def window_data_keys(s3: Any, bucket: str, prefix: str, topic: str, window: OffsetWindow, suffix: str,
                     out_layout: OutputLayout | None) -> list[str]:
    """Every data object in the bucket that belongs to this window (by its key), whatever attempt wrote it."""
    if out_layout is None:
        return [o["Key"] for o in list_objects(s3, bucket, window_object_stem(prefix, topic, window))]
    keys = []
    for o in list_objects(s3, bucket, window_scan_prefix(out_layout, prefix, topic, window)):
        try:
            v = parse_object_key(out_layout, prefix, o["Key"], suffix)
        except ValueError:
            continue  # not an object of this layout (another window's name that only shares the prefix)
        if (v.get("topic", topic), v.get("partition"), v.get("start_offset"), v.get("end_offset", window.end)) == (
                topic, window.partition, window.start, window.end):
            keys.append(o["Key"])
    return keys


def clean_staging(s3: Any, bucket: str, prefix: str, topic: str, window: OffsetWindow) -> int:
    keys = [o["Key"] for o in list_objects(s3, bucket, staging_prefix(prefix, topic, window))]
    delete_keys(s3, bucket, keys)
    return len(keys)


@dataclass(frozen=True)
class CommitResult:
    manifest: Manifest
    committed_by_us: bool  # False: another attempt committed this window first; we adopted its manifest


def commit_window(s3: Any, bucket: str, prefix: str, topic: str, window: OffsetWindow, attempt: str,
                  suffix: str, draft: Manifest, has_records: bool, fault: Fault = no_fault,
                  per_record: bool = False, dead_letter_attempt: str | None = None,
                  out_layout: OutputLayout | None = None, publish_codec: str | None = None) -> CommitResult:
    """`draft`: the window's manifest but for its objects (and bytes_written), which this fills in.
    `per_record`: the `bytes` format (one object per record, see publish_records). `dead_letter_attempt`: the
    staging attempt holding the window's undecodable records, published under the dead-letter prefix.
    `out_layout`: the archive's key template and partition_by (None: the default layout, keys.objects).
    `publish_codec`: compress each data part while publishing it (text formats' zstd, see model/formats.py)."""
    mkey = manifest_key(prefix, topic, window)
    parts = staged_parts(s3, bucket, staging_prefix(prefix, topic, window, attempt)) if has_records else []
    dead = (staged_parts(s3, bucket, staging_prefix(prefix, topic, window, dead_letter_attempt))
            if dead_letter_attempt else [])
    fault("staged")

    def adopt() -> CommitResult | None:
        theirs = read_manifest(s3, bucket, mkey)
        return None if theirs is None else CommitResult(theirs, committed_by_us=False)

    if (won := adopt()) is not None:
        return won

    def copy_all(staged: list[dict], key_for: Callable[[str | None, int], str], codec: str | None = None,
                 ) -> list[ManifestObject] | CommitResult:
        out = []
        for i, (part, final) in enumerate(zip(staged, final_keys(staged, key_for), strict=True)):
            try:
                obj = (publish_compressed(s3, bucket, part["Key"], final, codec) if codec
                       else {**_copy(s3, bucket, part["Key"], final), "size": part["Size"]})
            except ClientError as e:
                # A concurrent attempt that committed first may already have cleaned our staging.
                if error_code(e) in ("NoSuchKey", "404") and (won := adopt()) is not None:
                    return won
                raise
            out.append(ManifestObject(key=obj["key"], size=obj["size"], etag=obj["etag"]))
            fault(f"final:{i}")
        return out

    if per_record:
        objects: list[ManifestObject] | CommitResult = publish_records(
            s3, bucket, parts, lambda offset: record_object_key(prefix, topic, window, offset, suffix))
    else:
        objects = copy_all(parts, lambda b, i: object_key(prefix, topic, window, i, suffix, out_layout, b),
                           publish_codec)
    if isinstance(objects, CommitResult):
        return objects
    dead_objects = copy_all(dead, lambda b, i: dead_letter_key(prefix, topic, window, i))
    if isinstance(dead_objects, CommitResult):
        return dead_objects
    fault("final_written")

    ours = {o.key for o in objects} | {o.key for o in dead_objects}
    stale = [o["Key"] for o in list_objects(s3, bucket, dead_letter_stem(prefix, topic, window))
             if o["Key"] not in ours]
    stale += [k for k in window_data_keys(s3, bucket, prefix, topic, window, suffix, out_layout) if k not in ours]
    delete_keys(s3, bucket, stale)

    manifest = draft.with_objects(objects, dead_objects)
    try:
        s3.put_object(Bucket=bucket, Key=mkey, Body=manifest.dumps(), ContentType="application/json",
                      IfNoneMatch="*")
    except ClientError as e:
        if error_code(e) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
            if (won := adopt()) is not None:
                return won
        raise
    fault("manifest_written")
    clean_staging(s3, bucket, prefix, topic, window)
    return CommitResult(manifest, committed_by_us=True)
