"""The exactly-once commit of one window: staging -> deterministic final keys -> manifest (the commit point).

    1. Spark wrote the window to  _staging/<topic>/<window>/<attempt>/  (see stage.py).
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

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from s3_archive import layout
from s3_archive.windows import OffsetWindow

Fault = Callable[[str], None]


def no_fault(step: str) -> None:
    return None


class ArchiveIntegrityError(RuntimeError):
    """A committed window's objects are missing or changed in S3."""


def list_objects(s3: Any, bucket: str, prefix: str) -> Iterator[dict]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        yield from page.get("Contents", [])


def delete_keys(s3: Any, bucket: str, keys: list[str]) -> None:
    for i in range(0, len(keys), 1000):
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def read_manifest(s3: Any, bucket: str, key: str) -> dict | None:
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as e:
        if _code(e) in ("NoSuchKey", "404"):
            return None
        raise
    return json.loads(body)


def verify_manifest(s3: Any, bucket: str, manifest: dict) -> list[str]:
    """What is wrong with a committed window's objects in S3 (empty when all exist with their recorded sizes)."""
    problems = []
    for obj in manifest["objects"]:
        try:
            head = s3.head_object(Bucket=bucket, Key=obj["key"])
        except ClientError as e:
            if _code(e) in ("404", "NoSuchKey", "NotFound"):
                problems.append(f"missing: s3://{bucket}/{obj['key']}")
                continue
            raise
        if head["ContentLength"] != obj["size"]:
            problems.append(f"size changed: s3://{bucket}/{obj['key']} is {head['ContentLength']} bytes, "
                            f"manifest says {obj['size']}")
    return problems


def staged_parts(s3: Any, bucket: str, staging: str) -> list[dict]:
    """Spark's output files under one attempt's staging prefix, in part order (task, then file counter)."""
    parts = [o for o in list_objects(s3, bucket, staging)
             if not o["Key"].endswith("/") and o["Key"].rsplit("/", 1)[-1].startswith("part-")]
    return sorted(parts, key=lambda o: o["Key"])


def clean_staging(s3: Any, bucket: str, prefix: str, topic: str, window: OffsetWindow) -> int:
    keys = [o["Key"] for o in list_objects(s3, bucket, layout.staging_prefix(prefix, topic, window))]
    delete_keys(s3, bucket, keys)
    return len(keys)


@dataclass(frozen=True)
class CommitResult:
    manifest: dict
    committed_by_us: bool  # False: another attempt committed this window first; we adopted its manifest


def commit_window(s3: Any, bucket: str, prefix: str, topic: str, window: OffsetWindow, attempt: str,
                  suffix: str, manifest_fields: dict, has_records: bool, fault: Fault = no_fault) -> CommitResult:
    mkey = layout.manifest_key(prefix, topic, window)
    parts = staged_parts(s3, bucket, layout.staging_prefix(prefix, topic, window, attempt)) if has_records else []
    fault("staged")

    def adopt() -> CommitResult | None:
        theirs = read_manifest(s3, bucket, mkey)
        return None if theirs is None else CommitResult(theirs, committed_by_us=False)

    if (won := adopt()) is not None:
        return won
    objects = []
    for i, part in enumerate(parts):
        final = layout.object_key(prefix, topic, window, i, suffix)
        try:
            r = s3.copy_object(Bucket=bucket, Key=final, CopySource={"Bucket": bucket, "Key": part["Key"]})
        except ClientError as e:
            # A concurrent attempt that committed first may already have cleaned our staging.
            if _code(e) in ("NoSuchKey", "404") and (won := adopt()) is not None:
                return won
            raise
        objects.append({"key": final, "size": part["Size"], "etag": r["CopyObjectResult"]["ETag"].strip('"')})
        fault(f"final:{i}")
    fault("final_written")

    ours = {o["key"] for o in objects}
    stale = [o["Key"] for o in list_objects(s3, bucket, layout.window_object_stem(prefix, topic, window))
             if o["Key"] not in ours]
    delete_keys(s3, bucket, stale)

    manifest = {**manifest_fields, "attempt": attempt, "objects": objects,
                "bytes_written": sum(o["size"] for o in objects)}
    try:
        s3.put_object(Bucket=bucket, Key=mkey, Body=json.dumps(manifest, indent=1, sort_keys=True).encode(),
                      ContentType="application/json", IfNoneMatch="*")
    except ClientError as e:
        if _code(e) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
            if (won := adopt()) is not None:
                return won
        raise
    fault("manifest_written")
    clean_staging(s3, bucket, prefix, topic, window)
    return CommitResult(manifest, committed_by_us=True)
