"""Which target partition a restored record goes to: `same`, `murmur2` of its key (Kafka's default partitioner),
or an explicit `map`. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from murmurhash2 import murmurhash2

from s3_archive.model.errors import InvalidRestore

MAPPINGS = ("same", "murmur2", "map")


_KAFKA_SEED = 0x9747B28C
_ROUTE_CACHE = 1 << 16  # keys whose partition a run remembers (then it starts over)


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2` (32-bit MurmurHash2, seed 0x9747b28c), as a signed 32-bit int like Java's."""
    h = murmurhash2(data, _KAFKA_SEED)
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (not abs: abs(MIN_VALUE) overflows in Java)."""
    return n & 0x7FFFFFFF


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner (and librdkafka's `murmur2_random`) picks for a non-null key."""
    return to_positive(murmur2(key)) % num_partitions


@dataclass(frozen=True)
class PartitionMapping:
    """Where a source record goes: `same` partition, `murmur2` of its key, or an explicit `map` {src: dst}.

    murmur2 sends null keys to `source partition % target partitions`, not to a random partition as Kafka's
    producers do: the restore must put each record in the same place on every run for exactly-once to hold.
    """

    mode: str = "same"
    explicit: tuple[tuple[int, int], ...] = ()

    @classmethod
    def parse(cls, mode: str, mapping: dict[Any, Any] | None = None) -> PartitionMapping:
        if mode not in MAPPINGS:
            raise InvalidRestore(f"partition_mapping must be one of {', '.join(MAPPINGS)}; got {mode!r}")
        if mode != "map":
            if mapping:
                raise InvalidRestore(f"partition_map is only used with partition_mapping: map, got partition_mapping "
                                     f"{mode!r} and partition_map {mapping!r}")
            return cls(mode)
        if not mapping:
            raise InvalidRestore("partition_mapping: map needs partition_map {source partition: target partition}, "
                                 "e.g. {'0': 2, '1': 2}; got an empty map")
        pairs = []
        for src, dst in mapping.items():
            try:
                s, d = int(src), int(dst)
            except (TypeError, ValueError):
                raise InvalidRestore(f"partition_map entries must be partition numbers, got {src!r}: {dst!r}") from None
            if s < 0 or d < 0:
                raise InvalidRestore(f"partition_map entries must be >= 0, got {src!r}: {dst!r}")
            pairs.append((s, d))
        if len({s for s, _ in pairs}) != len(pairs):
            raise InvalidRestore(f"partition_map names a source partition twice: {mapping!r}")
        return cls("map", tuple(sorted(pairs)))

    def check(self, source_partitions: Iterable[int], num_target: int, target_topic: str) -> None:
        """Fail before producing anything if some source partition has nowhere to go."""
        explicit = dict(self.explicit)
        for sp in sorted(set(source_partitions)):
            if self.mode == "same" and sp >= num_target:
                raise InvalidRestore(
                    f"source partition {sp} has no same-numbered partition in target topic {target_topic!r} "
                    f"({num_target} partitions); use partition_mapping: murmur2 or map, or add partitions")
            if self.mode == "map":
                if sp not in explicit:
                    raise InvalidRestore(f"partition_map has no entry for source partition {sp}; "
                                         f"it maps only {sorted(explicit)}")
                if explicit[sp] >= num_target:
                    raise InvalidRestore(f"partition_map sends source partition {sp} to partition {explicit[sp]}, "
                                         f"but target topic {target_topic!r} has {num_target} partitions "
                                         f"(0..{num_target - 1})")

    def target(self, source_partition: int, key: bytes | None, num_target: int) -> int:
        if self.mode == "same":
            return source_partition
        if self.mode == "murmur2":
            return source_partition % num_target if key is None else murmur2_partition(key, num_target)
        return dict(self.explicit)[source_partition]

    def compiled(self, num_target: int) -> Callable[[int, bytes | None], int]:
        """`target` specialised once per run (it is called for every record)."""
        if self.mode == "same":
            return lambda sp, key: sp
        if self.mode == "murmur2":
            cache: dict[bytes, int] = {}  # keys repeat (an entity's events): hash each once per run

            def route(sp: int, key: bytes | None) -> int:
                if key is None:
                    return sp % num_target
                tp = cache.get(key)
                if tp is None:
                    if len(cache) >= _ROUTE_CACHE:
                        cache.clear()
                    tp = cache[key] = (murmurhash2(key, _KAFKA_SEED) & 0x7FFFFFFF) % num_target  # to_positive
                return tp

            return route
        explicit = dict(self.explicit)
        return lambda sp, key: explicit[sp]
