"""The link a window's manifest records to the previous committed manifest of its partition (a chain per partition,
docs/compliance.md): found by listing the partition's manifests just before the window's (window keys sort by start
offset), read, and hashed as committed. One LIST and one GET per commit in the usual case.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from itertools import takewhile
from typing import Any, Protocol

from s3_archive.archive.integrity import link_to, pick_previous
from s3_archive.io.s3 import S3Client, list_objects, read_bytes
from s3_archive.keys.objects import WindowLocation, manifests_from, partition_manifest_prefix
from s3_archive.model.manifest import MANIFEST_VERSION, ManifestLink
from s3_archive.model.windows import OffsetWindow

# How far before the window a listing starts, in window sizes: the previous window is usually the one just before.
_REACHES = (4, 1024)


def previous_link(s3: S3Client, where: WindowLocation) -> ManifestLink | None:
    """The link to the committed manifest of the window of the same partition that starts last before `where`'s
    window (None: it is the first). The listing starts a few windows back and reaches further only when it finds
    nothing there; a manifest gone between the LIST and the GET is looked for again."""
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
