"""Tamper evidence, pure (docs/compliance.md): the link from a manifest to the previous committed manifest of its
partition, the chain walk that checks those links, a window's objects in the bucket against its manifest, and the
order a verify run reads windows in (the rotation). The reads and the run are archive/verify.py's.

What `verify` reports for a window is a list of `Finding`s, each naming the window, the object or manifest and what
differs; `unhashed` (a manifest written before hashes, version 1 or 2, or an Iceberg table's data files) is not a
failure: those objects are checked by size and ETag only, and the window is counted as unhashed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from s3_archive.model.manifest import Manifest, ManifestLink
from s3_archive.model.windows import InvalidWindow, OffsetWindow


class Differs(StrEnum):
    """What a finding says differs (metadata and the CLI's report use these words)."""

    CHANGED = "changed"  # an object's bytes (SHA-256, or ETag when unhashed) are not those the manifest lists
    RESIZED = "resized"  # an object's size is not the manifest's
    MISSING = "missing"  # an object the manifest lists is gone
    ADDED = "added"  # an object under the window's keys that the manifest does not list
    MANIFEST_EDITED = "manifest_edited"  # a manifest's bytes are not those the next manifest's link recorded
    MANIFEST_MISSING = "manifest_missing"  # a manifest a link (or the last run) names is gone
    MANIFEST_INVALID = "manifest_invalid"  # a manifest that does not parse
    UNHASHED = "unhashed"  # not a failure: objects without a SHA-256 in the manifest (checked by size and ETag)


@dataclass(frozen=True)
class Finding:
    window: str  # the window key
    differs: Differs
    key: str  # the object or manifest
    detail: str

    @property
    def failure(self) -> bool:
        return self.differs != Differs.UNHASHED

    def text(self, bucket: str) -> str:
        if self.differs == Differs.UNHASHED:  # about the window's manifest as a whole
            return f"window {self.window}: {self.differs}: {self.detail}"
        return f"window {self.window}: {self.differs} s3://{bucket}/{self.key}: {self.detail}"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def window_of_manifest_key(key: str) -> OffsetWindow | None:
    """The window a manifest key names (`…/<window key>.json`); None for any other key."""
    name = key.rsplit("/", 1)[-1]
    if not name.endswith(".json"):
        return None
    try:
        return OffsetWindow.parse(name.removesuffix(".json"))
    except InvalidWindow:
        return None


def pick_previous(keys: Iterable[str], window: OffsetWindow) -> str | None:
    """Of a partition's manifest keys, the one of the window that ends at or before `window` starts and starts
    last: the previous committed manifest of the chain (None: there is none among `keys`)."""
    best: tuple[int, str] | None = None
    for key in keys:
        w = window_of_manifest_key(key)
        if w is not None and w.partition == window.partition and w.end <= window.start and (
                best is None or w.start > best[0]):
            best = (w.start, key)
    return None if best is None else best[1]


def generation_of(body: bytes) -> int:
    """A committed manifest's generation, read from its bytes without judging the rest (versions 1 and 2: 1)."""
    try:
        value = json.loads(body).get("generation")
    except (ValueError, AttributeError):
        return 1
    return value if isinstance(value, int) and value >= 1 else 1


def link_to(key: str, body: bytes) -> ManifestLink:
    """The link a manifest records to the committed manifest `key` whose bytes are `body`."""
    return ManifestLink(key=key, generation=generation_of(body), sha256=sha256_hex(body))


@dataclass(frozen=True)
class Committed:
    """A committed manifest as the chain walk sees it: its bytes' hash and, when it parsed, the manifest."""

    key: str
    sha256: str
    manifest: Manifest | None


def link_findings(m: Manifest, target: Committed | None, older_exist: bool) -> list[Finding]:
    """What is wrong with `m`'s link to its previous manifest: `target` is that manifest as found (None: gone);
    `older_exist`: the partition has a manifest older than the link's target (so a missing one was not the start
    of the chain that expired)."""
    link = m.previous_manifest
    if link is None:
        return []
    prev = window_of_manifest_key(link.key)
    prev_key = prev.key if prev else link.key
    if target is None:
        if not older_exist:
            return []  # the chain's start is gone with everything before it (lifecycle expiration)
        return [Finding(prev_key, Differs.MANIFEST_MISSING, link.key,
                        f"the manifest of window {m.window_key} links to it as the previous committed manifest "
                        f"(sha256 {link.sha256}), but it is gone")]
    if target.sha256 == link.sha256:
        return []
    later = target.manifest
    if later is not None and (later.generation or 1) > link.generation and any(
            s.generation == link.generation and s.sha256 == link.sha256 for s in later.supersedes):
        return []  # a later generation of that window (a rewrite) that names the one linked
    return [Finding(prev_key, Differs.MANIFEST_EDITED, link.key,
                    f"its bytes hash to {target.sha256}, but the manifest of window {m.window_key} recorded "
                    f"{link.sha256} when it was committed")]


def head_findings(key: str, recorded_sha256: str, now: Committed | None) -> list[Finding]:
    """The newest manifest of a partition at the last verify (no later manifest links to it yet), against now."""
    w = window_of_manifest_key(key)
    name = w.key if w else key
    if now is None:
        return [Finding(name, Differs.MANIFEST_MISSING, key, f"it was the newest manifest of its partition at the "
                        f"last verify (sha256 {recorded_sha256}) and is gone")]
    later = now.manifest
    superseded = later is not None and any(s.sha256 == recorded_sha256 for s in later.supersedes)
    if now.sha256 != recorded_sha256 and not superseded:
        return [Finding(name, Differs.MANIFEST_EDITED, key, f"its bytes hash to {now.sha256}; at the last verify "
                        f"they hashed to {recorded_sha256}")]
    return []


@dataclass(frozen=True)
class Listed:
    """An object as the bucket lists it."""

    key: str
    size: int
    etag: str


def object_findings(m: Manifest, listed: Mapping[str, Listed], read: Mapping[str, str]) -> list[Finding]:
    """A window's objects in the bucket against its manifest. `listed`: every object whose key belongs to the
    window (data and dead letters); `read`: the SHA-256 of the bytes read of each hashed object (a key absent from
    `read` was not readable: missing)."""
    out: list[Finding] = []
    unhashed = 0
    for o in m.all_objects:
        there = listed.get(o.key)
        if there is None:
            out.append(Finding(m.window_key, Differs.MISSING, o.key, f"the manifest lists it ({o.size} bytes), the "
                                                                        "bucket has no such object"))
        elif there.size != o.size:
            out.append(Finding(m.window_key, Differs.RESIZED, o.key, f"{there.size} bytes, the manifest lists "
                                                                        f"{o.size}"))
        elif o.sha256 is None:
            unhashed += 1
            if there.etag != o.etag.strip('"'):  # format iceberg's manifests keep the ETag quoted
                out.append(Finding(m.window_key, Differs.CHANGED, o.key, f"ETag {there.etag}, the manifest lists "
                                                                            f"{o.etag} (no SHA-256 recorded)"))
        elif o.key not in read:
            out.append(Finding(m.window_key, Differs.MISSING, o.key, "listed, but gone when read"))
        elif read[o.key] != o.sha256:
            out.append(Finding(m.window_key, Differs.CHANGED, o.key, f"its bytes hash to {read[o.key]}, the "
                                                                        f"manifest recorded {o.sha256}"))
    known = {o.key for o in m.all_objects}
    out += [Finding(m.window_key, Differs.ADDED, k, f"{v.size} bytes under the window's keys that its manifest "
                                                     "does not list") for k, v in sorted(listed.items())
            if k not in known]
    if unhashed:
        out.append(Finding(m.window_key, Differs.UNHASHED, m.window_key,
                           f"{unhashed} object(s) without a SHA-256 (manifest_version {m.manifest_version}"
                           f"{', format iceberg' if m.iceberg_table else ''}): checked by size and ETag only"))
    return out


def rotation(keys: list[str], cursor: str | None) -> list[str]:
    """The order a verify run reads windows in: those after `cursor` (the last window the previous run read),
    then from the start, ending with `cursor` itself; every key once. `keys` in any order."""
    ordered = sorted(keys)
    if cursor is None:
        return ordered
    return [k for k in ordered if k > cursor] + [k for k in ordered if k <= cursor]
