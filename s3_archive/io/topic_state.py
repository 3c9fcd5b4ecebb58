"""The topics each `topic_pattern` archive knows: a small JSON file in the state directory (`paths.state_dir`).

Definitions read it when they load, so loading never connects to Kafka. Only a refresh grows it
(`s3-archive refresh-topics`, or the sensor `s3_archive_topic_discovery`): a refresh that cannot reach Kafka changes
nothing, and a topic that disappears from Kafka stays known, so its assets, checks and lifecycle rules stay.
`forget_topics` removes topics, explicitly.

File: `{"version": 1, "archives": {"<archive name>": ["<topic>", ...]}}`. Every change is a read-modify-write under
an exclusive lock (`topics.json.lock`), written to a temporary file and renamed into place, so a reader never sees
half a file and two refreshes never lose each other's topics.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from s3_archive.config.settings import Settings, resolve_topic_patterns
from s3_archive.io.kafka import KafkaResource
from s3_archive.model.errors import TopicStateUnreadable

VERSION = 1


def read_known_topics(path: Path) -> dict[str, list[str]]:
    """Per archive name, the topics its pattern knows; no file yet: none."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise TopicStateUnreadable(f"cannot read the topic state {path}: {e.strerror}") from None
    try:
        data = json.loads(text)
        archives = data["archives"] if data.get("version") == VERSION else None
        if not isinstance(archives, dict) or not all(
                isinstance(ts, list) and all(isinstance(t, str) for t in ts) for ts in archives.values()):
            raise ValueError(f'expected {{"version": {VERSION}, "archives": {{"<archive>": ["<topic>", ...]}}}}')
    except (ValueError, AttributeError, KeyError, TypeError) as e:
        raise TopicStateUnreadable(f"{path} is not a topic state file ({e}); fix or delete it, then run "
                                   "`s3-archive refresh-topics`") from None
    return {name: sorted(ts) for name, ts in archives.items()}


def write_known_topics(path: Path, known: Mapping[str, Sequence[str]]) -> None:
    """Atomically: a temporary file in the same directory, flushed to disk, renamed over the old one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"version": VERSION, "archives": {n: sorted(ts) for n, ts in sorted(known.items())}},
                      indent=2) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def merge_topics(settings: Settings, cluster_topics: Sequence[str],
                 known: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """The known topics plus what each pattern now claims on the cluster (pure). Nothing is ever dropped: not a
    topic gone from Kafka, nor the entry of an archive no longer in the config."""
    resolved = resolve_topic_patterns(settings, cluster_topics)
    out = {name: sorted(ts) for name, ts in known.items()}
    for a, r in zip(settings.archives, resolved.archives):
        if a.topic_pattern is not None:
            out[a.name] = sorted(set(known.get(a.name, ())) | (set(r.topics) - set(a.topics)))
    return out


@dataclass(frozen=True)
class Refresh:
    """What a refresh did, per pattern archive."""

    known: dict[str, list[str]]  # every topic each archive knows now
    added: dict[str, list[str]]  # new to the archive in this refresh
    gone: dict[str, list[str]]  # known but no longer in Kafka (kept)


def refresh_topics(settings: Settings, kafka: KafkaResource, path: Path) -> Refresh:
    """Add each `topic_pattern`'s new matches on the cluster to the state. KafkaUnavailable: nothing changed."""
    cluster = kafka.topics()  # before taking the lock: a slow Kafka does not hold other refreshes up
    with _locked(path):
        before = read_known_topics(path)
        known = merge_topics(settings, cluster, before)
        if known != before:
            write_known_topics(path, known)
    present = set(cluster)
    names = [a.name for a in settings.archives if a.topic_pattern is not None]
    return Refresh(
        known={n: known.get(n, []) for n in names},
        added={n: d for n in names if (d := sorted(set(known.get(n, [])) - set(before.get(n, []))))},
        gone={n: g for n in names if (g := [t for t in known.get(n, []) if t not in present])},
    )


def forget_topics(path: Path, topics: Sequence[str]) -> dict[str, list[str]]:
    """Remove topics from every archive that knows them (no Kafka connection); per archive, what was removed. A
    forgotten topic that still exists and matches its pattern comes back at the next refresh."""
    with _locked(path):
        before = read_known_topics(path)
        after = {n: [t for t in ts if t not in topics] for n, ts in before.items()}
        if after != before:
            write_known_topics(path, after)
    return {n: r for n, ts in before.items() if (r := [t for t in ts if t in topics])}
