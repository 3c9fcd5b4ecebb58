"""The link a window's manifest records to the previous committed manifest of its partition (a chain per partition,
docs/compliance.md): found by listing the partition's manifests just before the window's (window keys sort by start
offset), read, and hashed as committed. One LIST and one GET per commit in the usual case; no request for a window
starting at offset 0 (nothing can come before it), one GET when the run's own listing of the partition's manifests
(`run_manifests`, made before the write) already shows the window that ends where this one starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import takewhile
from typing import Any, Protocol

from s3_archive.archive.integrity import link_to, pick_previous, window_of_manifest_key
from s3_archive.io.s3 import S3Client, bucket_errors, list_objects, read_bytes
from s3_archive.keys.objects import WindowLocation, manifest_key, manifests_from, partition_manifest_prefix
from s3_archive.model.manifest import MANIFEST_VERSION, ManifestLink
from s3_archive.model.windows import OffsetWindow

# How far before the window a listing starts, in window sizes: the previous window is usually the one just before.
_REACHES = (4, 1024)


def listed_link(s3: S3Client, where: WindowLocation, listed: Sequence[str] = ()) -> tuple[bool, ManifestLink | None]:
    """(True, the link) when it is known without a listing: none for a window starting at offset 0 (every window
    ends after it), or the window ending where this one starts among `listed` (manifest keys of the partition listed
    earlier, `run_manifests`: nothing can come between), read; (False, None) when only a listing can tell."""
    w = where.window
    if w.start == 0:
        return True, None
    adjacent = [k for k in listed if (lw := window_of_manifest_key(k)) is not None and lw.partition == w.partition
                and lw.end == w.start]
    if adjacent and (body := read_bytes(s3, where.bucket, adjacent[-1])) is not None:
        return True, link_to(adjacent[-1], body)
    return False, None  # none listed, or gone since it was: looked for by listing


def previous_link(s3: S3Client, where: WindowLocation) -> ManifestLink | None:
    """The link to the committed manifest of the window of the same partition that starts last before `where`'s
    window (None: it is the first). The listing starts a few windows back and reaches further only when it finds
    nothing there; a manifest gone between the LIST and the GET is looked for again."""
    known, link = listed_link(s3, where)
    if known:
        return link
    w = where.window
    stem = partition_manifest_prefix(where.prefix, where.topic, w.partition)
    for _ in range(3):
        key = None
        for reach in (*_REACHES, None):
            since = None if reach is None else w.start - reach * max(w.size, 1)
            after = manifests_from(where.prefix, where.topic, w.partition, since) if since and since > 0 else None
            listed = takewhile(lambda k: k < where.manifest_key,
                               (o["Key"] for o in list_objects(s3, where.bucket, stem, after)))
            key = pick_previous(listed, w)
            if key is not None or after is None:
                break
        if key is None:
            return None
        body = read_bytes(s3, where.bucket, key)
        if body is not None:
            return link_to(key, body)
    raise RuntimeError(f"the previous manifest of window {w.key} of {where.topic!r} kept disappearing while it was "
                       "read (3 tries); run the window again")



def run_manifests(s3: S3Client, bucket: str, prefix: str, topic: str,
                  windows: Sequence[OffsetWindow]) -> dict[int, list[str]]:
    """Before a run writes: per partition of `windows`, the committed manifest keys from a few windows before its
    first window of the run (`_REACHES[0]` of its size) to its last one, in one LIST (a page holds 1,000 keys; a
    run's windows of a partition that lie further apart than that are listed apart, so no listing reads the
    manifests of windows between them), 16 listings at a time. A run's first S3 request under the archive's
    prefix, so a missing bucket or refused access is check_bucket's clear error here."""
    runs: list[list[OffsetWindow]] = []  # windows of one partition, each within reach of the one before
    for w in sorted(windows):
        last = runs[-1][-1] if runs else None
        if last is not None and last.partition == w.partition and w.start - last.end <= _REACHES[0] * w.size:
            runs[-1].append(w)
        else:
            runs.append([w])

    def listing(ws: list[OffsetWindow]) -> list[str]:
        first, last = ws[0], ws[-1]
        since = first.start - _REACHES[0] * first.size
        after = manifests_from(prefix, topic, first.partition, since) if since > 0 else None
        end = manifest_key(prefix, topic, last)
        stem = partition_manifest_prefix(prefix, topic, first.partition)
        with bucket_errors(s3, bucket):
            return list(takewhile(lambda k: k <= end, (o["Key"] for o in list_objects(s3, bucket, stem, after))))

    out: dict[int, list[str]] = {}
    if runs:
        with ThreadPoolExecutor(min(16, len(runs))) as pool:
            for ws, keys in zip(runs, pool.map(listing, runs), strict=True):
                out.setdefault(ws[0].partition, []).extend(keys)
    return out


class Committing(Protocol):
    def __call__(self, window: OffsetWindow, previous: ManifestLink | None) -> Any: ...


def commit_in_chain_order(commit: Committing, windows: list[OffsetWindow]) -> dict[OffsetWindow, Any]:
    """commit(window, previous) for every window of a run: a partition's windows one after the other in offset
    order, so that each manifest links to the one committed just before it, partitions 16 at a time. `previous` is
    the link to the manifest this run committed for the window ending where this one starts (no LIST, no GET), or
    None (put_manifest looks it up). An exception is the window's result; the next window then looks its link up."""
    by_partition: dict[int, list[OffsetWindow]] = {}
    for w in sorted(windows):
        by_partition.setdefault(w.partition, []).append(w)

    def chain(ws: list[OffsetWindow]) -> dict[OffsetWindow, Any]:
        out: dict[OffsetWindow, Any] = {}
        last: tuple[int, ManifestLink] | None = None
        for w in ws:
            try:
                r = out[w] = commit(w, last[1] if last is not None and last[0] == w.start else None)
            except Exception as e:  # reported per window: the other windows still commit
                out[w], last = e, None
                continue
            m = r.manifest
            ours = getattr(r, "outcome", None) == "committed" and m.manifest_version == MANIFEST_VERSION
            last = (w.end, link_to(r.where.manifest_key, m.dumps())) if ours else None
        return out

    if not by_partition:
        return {}
    with ThreadPoolExecutor(min(16, len(by_partition))) as pool:
        return {w: r for part in pool.map(chain, by_partition.values()) for w, r in part.items()}
