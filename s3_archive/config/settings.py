"""The whole config file (`archives:` and `foreign_sources:`), loaded from YAML and validated."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import Field, ValidationError, model_validator

from s3_archive.config.archive import ArchiveConfig
from s3_archive.config.declarations import Declared, read_declarations
from s3_archive.config.foreign import ForeignSource
from s3_archive.model.base import StrictModel
from s3_archive.model.errors import InvalidConfig


class TopicDiscovery(StrictModel):
    """The sensor s3_archive_topic_discovery (archives with a topic_pattern; docs/sensors.md)."""

    interval_seconds: int = Field(default=300, ge=5, le=86_400, description="evaluated at most this often")


class Settings(StrictModel):
    archives: list[ArchiveConfig] = Field(min_length=1)
    topic_discovery: TopicDiscovery = TopicDiscovery()
    # Archives written by Kafka Connect S3 sinks, restorable like ours (docs/restore-foreign.md)
    foreign_sources: list[ForeignSource] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> Settings:
        # Cross-archive checks: the message starts with the key path, as field errors do.
        names: dict[str, int] = {}
        topics: dict[str, int] = {}
        for i, a in enumerate(self.archives):
            if a.name in names:
                raise ValueError(f"archives[{i}].name: {a.name!r} is already the name of archives[{names[a.name]}]; "
                                 "archive names must be unique")
            names[a.name] = i
            for t in a.topics:
                if t in topics:
                    raise ValueError(f"archives[{i}].topics: topic {t!r} is already in archives[{topics[t]}] "
                                     f"({self.archives[topics[t]].name!r}); a topic belongs to one archive")
                topics[t] = i
        seen: dict[str, int] = {}
        taken: dict[tuple[str, str], int] = {}
        for i, f in enumerate(self.foreign_sources):
            if f.name in seen:
                raise ValueError(f"foreign_sources[{i}].name: {f.name!r} is already the name of "
                                 f"foreign_sources[{seen[f.name]}]; names must be unique")
            seen[f.name] = i
            if f.archive is None:
                continue
            a = next((a for a in self.archives if a.name == f.archive), None)
            if a is None:
                raise ValueError(f"foreign_sources[{i}].archive: no archive is named {f.archive!r} (archives: "
                                 f"{', '.join(x.name for x in self.archives)})")
            if f.topic not in a.topics and not (a.topic_pattern and re.fullmatch(a.topic_pattern, f.topic)):
                raise ValueError(f"foreign_sources[{i}].archive: topic {f.topic!r} is not a topic of archive "
                                 f"{a.name!r} (topics: {a.topics}" + (f", topic_pattern {a.topic_pattern!r}"
                                                                      if a.topic_pattern else "") + ")")
            if (a.name, f.topic) in taken:
                raise ValueError(f"foreign_sources[{i}].archive: foreign_sources[{taken[(a.name, f.topic)]}] "
                                 f"already precedes archive {a.name!r} for topic {f.topic!r}; one sink per topic")
            taken[(a.name, f.topic)] = i
        return self

    def predecessor(self, archive: str, topic: str) -> ForeignSource | None:
        """The sink the archive took over `topic` from (a foreign source with `archive`), if any."""
        return next((f for f in self.foreign_sources if f.archive == archive and f.topic == topic), None)

    def archive_for(self, topic: str) -> ArchiveConfig:
        for a in self.archives:
            if topic in a.topics:
                return a
        raise KeyError(topic)


def _loc(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


# What the top of the file must be; said instead of pydantic's own words (which name the model class).
_TOP = "the config needs the key `archives`: a list of archives (and optionally `foreign_sources`)"


def config_error(*problems: str) -> InvalidConfig:
    """The one form of every refusal of the config, at parse or when definitions load: a line per problem, each
    starting with its key path (`archives[1].prefix: ...`)."""
    return InvalidConfig("invalid s3-archive config:\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class KeyPaths:
    """Where each archive and topic sits in the config file as loaded: for refusals found once `topic_pattern`s are
    resolved (a matched topic has no place of its own: its archive's pattern stands for it)."""

    archives: dict[str, str]  # archive name -> "archives[1]"
    topics: dict[str, str]  # listed topic -> "archives[1].topics[0]"

    @classmethod
    def of(cls, settings: Settings) -> KeyPaths:
        """Of `settings` as loaded (not resolved: a resolved archive lists its matched topics among `topics`)."""
        return cls({a.name: f"archives[{i}]" for i, a in enumerate(settings.archives)},
                   {t: f"archives[{i}].topics[{k}]" for i, a in enumerate(settings.archives)
                    for k, t in enumerate(a.topics)})

    def topic(self, archive: str, topic: str) -> str:
        return self.topics.get(topic, f"{self.archives[archive]}.topic_pattern")


def parse_settings(data: object) -> Settings:
    if data is None:  # an empty file, or only comments
        raise config_error(f"(top level): the file is empty; {_TOP}")
    if not isinstance(data, Mapping):
        raise config_error(f"(top level): {_TOP}, got a {type(data).__name__} {data!r:.60}")
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] not in ("value_error", "assertion_error", "missing") and "input" in err:
                msg += f", got {err['input']!r}"
            # Cross-archive checks already start with their key path (see Settings._unique).
            lines.append(msg if not err["loc"] and msg.startswith("archives[") else f"{_loc(err['loc'])}: {msg}")
        raise config_error(*lines) from None


def declared_settings(config: Declared) -> Settings:
    """The settings of archives declared as components, validated as a config file listing them is."""
    try:
        return parse_settings(config.data)
    except InvalidConfig as e:
        raise config.error(e) from None


def load_settings(path: Path) -> Settings:
    """A config file's settings; a folder: its archives declared as components (config/declarations.py)."""
    if path.is_dir():
        return declared_settings(read_declarations(path))
    try:
        text = path.read_text()
    except OSError as e:
        raise InvalidConfig(f"cannot read the s3-archive config {path}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InvalidConfig(f"{path} is not valid YAML: {e}") from None
    return parse_settings(data)


def resolve_topic_patterns(settings: Settings, topics: Sequence[str] | Mapping[str, Sequence[str]]) -> Settings:
    """Settings with every archive's `topic_pattern` expanded against candidate topics (pure).

    `topics`: the cluster's topics (one list for every archive, as a refresh sees them), or per archive name the
    topics that archive knows (the topic state, when definitions load). A topic listed explicitly anywhere stays
    with that archive; a topic matched by several patterns goes to the first archive; Kafka's internal topics
    (`__consumer_offsets`, `__transaction_state`, ...) and any archive's dead-letter topics never match (an
    archive would otherwise archive its own dead letters, and dead-letter them again).
    """
    taken = {t for a in settings.archives for t in a.topics}
    dead = [re.compile(re.escape(a.dead_letter_topic).replace(re.escape("{topic}"), ".+"))
            for a in settings.archives if a.dead_letter_topic is not None]
    archives = []
    for a in settings.archives:
        extra = []
        if a.topic_pattern is not None:
            pattern = re.compile(a.topic_pattern)
            candidates = topics.get(a.name, ()) if isinstance(topics, Mapping) else topics
            extra = sorted({t for t in candidates
                            if not t.startswith("__") and t not in taken and pattern.fullmatch(t)
                            and not any(d.fullmatch(t) for d in dead)})
            taken |= set(extra)
        archives.append(a.model_copy(update={"topics": [*a.topics, *extra]}))
    return settings.model_copy(update={"archives": archives})
