"""The recovery job, `dr_recover`: a whole cluster from the archives (recovery/recover.py), launched from the UI
with a config whose first launch only plans (`mode: plan`). The target cluster is the `kafka` resource, or
`target_bootstrap_servers` with the resource's other settings (its credentials)."""

# No `from __future__ import annotations`: Dagster reads the context annotation at definition time.

from typing import Literal

import dagster as dg
from pydantic import Field

from s3_archive.config.archive import ArchiveConfig
from s3_archive.io.kafka import KafkaResource
from s3_archive.io.s3_resource import S3Resource
from s3_archive.model.errors import InvalidRestore, UserError
from s3_archive.recovery.recover import Recovery, RecoveryOptions

JOB_NAME = "dr_recover"


class RecoveryRunConfig(dg.Config):
    mode: Literal["plan", "recover"] = Field(default="plan", description="plan: what would be created, restored "
                                             "and set, nothing written; recover: do it")
    archives: list[str] | None = Field(default=None, description="archive names; None: all")
    topics: list[str] | None = Field(default=None, description="only these archived topics; None: all")
    target_bootstrap_servers: str | None = Field(default=None, description="the target cluster; None: the kafka "
                                                 "resource's (its security settings are used either way)")
    as_of_ms: int | None = Field(default=None, description="point in time: the newest group snapshot at or "
                                 "before it, and records older than it")
    allow_config_changes: bool = Field(default=False, description="restore into existing topics whose "
                                       "cleanup.policy or timestamp type differ from the captured ones")
    partitions: dict[str, int] = Field(default_factory=dict, description="topic -> partition count other than "
                                       "the captured one (murmur2 remap; its groups are not translated)")
    skip_groups: list[str] = Field(default_factory=list, description="consumer groups whose offsets are not set")

    def options(self) -> RecoveryOptions:
        return RecoveryOptions(self.mode == "recover", tuple(self.topics) if self.topics is not None else None,
                               self.as_of_ms, self.allow_config_changes, dict(self.partitions),
                               tuple(self.skip_groups))


def chosen_archives(archives: list[ArchiveConfig], names: list[str] | None) -> list[ArchiveConfig]:
    if names is None:
        return list(archives)
    unknown = sorted(set(names) - {a.name for a in archives})
    if unknown:
        raise InvalidRestore(f"archives {unknown} are not configured; the archives are "
                             f"{sorted(a.name for a in archives)}")
    return [a for a in archives if a.name in names]


def build_recovery_job(archives: list[ArchiveConfig]) -> dg.JobDefinition:
    @dg.op(name="recover_cluster")
    def _recover(context: dg.OpExecutionContext, config: RecoveryRunConfig, kafka: KafkaResource,
                 s3: S3Resource) -> dg.Output:
        target = kafka if config.target_bootstrap_servers is None else kafka.model_copy(
            update={"bootstrap_servers": config.target_bootstrap_servers})
        try:
            rep = Recovery(chosen_archives(archives, config.archives), target, s3.get_client(), context.log,
                           config.options()).run()
        except UserError as e:
            raise dg.Failure(description=f"{type(e).__name__}: {e}") from None
        finally:
            if target is not kafka:
                target.close()
        for line in rep.lines():
            context.log.info(line)
        return dg.Output(None, metadata={"mode": config.mode, "changed": rep.changed,
                                         "topics_created": len(rep.created), "records_restored": rep.records_restored,
                                         "groups_set": len(rep.groups_set),
                                         "plan": dg.MetadataValue.md("\n".join(f"- {x}" for x in rep.lines()))})

    @dg.job(name=JOB_NAME, description="Recover a whole cluster from the archives: topics as captured, every "
            "window restored exactly once, each consumer group's committed offsets translated "
            "(docs/disaster-recovery.md). The first launch plans (mode: plan).")
    def _job() -> None:
        _recover()

    return _job
