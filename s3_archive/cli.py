"""`s3-archive`: the local stack, the demo, the topics of `topic_pattern`s, the IAM policy, Kafka Connect S3
sink configs imported as archives, `verify` (an archive's windows checked against their manifests) and `erase`
(records erased from an archive on request)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from s3_archive.io.paths import local_stack_dir
from s3_archive.local.processes import StackError
from s3_archive.metrics.command import metrics_arguments, metrics_command
from s3_archive.model.errors import (
    InvalidConfig,
    InvalidRestore,
    KafkaUnavailable,
    MissingJars,
    TopicStateUnreadable,
    UnsupportedConnectConfig,
)

if TYPE_CHECKING:
    from s3_archive.config.archive import ArchiveConfig

# The demo's archives, declared as components (definitions.DEMO_CONFIG, without importing all definitions).
DEMO_CONFIG = Path(__file__).parent / "local" / "demo_defs"


def refresh_topics_command(config: Path, forget: list[str]) -> int:
    """`s3-archive refresh-topics`: with the Kafka settings of the runs (the same resource from the same environment
    variables, so SASL and TLS apply), add each `topic_pattern`'s new matches to the topic state; or forget topics."""
    import dagster as dg

    from s3_archive.config.settings import load_settings
    from s3_archive.defs.archive.discovery import RELOAD_HINT
    from s3_archive.defs.resources import kafka_resource, retired_env_warning
    from s3_archive.io.paths import topic_state_file
    from s3_archive.io.topic_state import forget_topics, refresh_topics

    state = topic_state_file()
    if forget:
        removed = forget_topics(state, forget)
        for name, topics in sorted(removed.items()):
            print(f"archive {name!r}: forgot {', '.join(topics)}")
        unknown = sorted(set(forget) - {t for ts in removed.values() for t in ts})
        if unknown:
            print(f"not known by any archive: {', '.join(unknown)}")
        print(f"topic state: {state}" + ("; reload the code location to drop their assets" if removed else ""))
        return 0
    settings = load_settings(config)
    if not any(a.topic_pattern for a in settings.archives):
        print(f"no archive in {config} has a topic_pattern; nothing to refresh")
        return 0
    retired_env_warning()
    if not os.environ.get("S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS"):
        raise KafkaUnavailable("S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS is not set")
    with dg.build_resources({"kafka": kafka_resource()}) as resources:
        result = refresh_topics(settings, resources.kafka, state)
    for a in settings.archives:
        if a.topic_pattern is None:
            continue
        known = result.known.get(a.name, [])
        print(f"archive {a.name!r} (topic_pattern '{a.topic_pattern}'): {len(known)} known topics"
              + (f": {', '.join(known)}" if known else ""))
        if a.name in result.added:
            print(f"  new: {', '.join(result.added[a.name])}")
        if a.name in result.gone:
            print(f"  no longer in Kafka (kept; --forget TOPIC removes one): {', '.join(result.gone[a.name])}")
    print(f"topic state: {state}" + (f"; {RELOAD_HINT}" if result.added else ""))
    return 0


def dr_command(args: argparse.Namespace) -> int:
    """`s3-archive dr status|plan|recover`: the RPO of each topic and group, or the recovery job's work from here,
    with the runs' Kafka and S3 settings ($S3_ARCHIVE_KAFKA_*, $S3_ARCHIVE_S3_*; the target: --target-bootstrap)."""
    import time

    import dagster as dg

    from s3_archive.config.settings import load_settings
    from s3_archive.defs.recovery.jobs import chosen_archives
    from s3_archive.defs.resources import kafka_resource, s3_resource
    from s3_archive.recovery.recover import Recovery, RecoveryOptions
    from s3_archive.recovery.status import rpo

    settings = load_settings(_config_path(args))
    archives = chosen_archives(settings.archives, args.archive or None)
    with dg.build_resources({"s3": s3_resource()}) as res:
        s3 = res.s3.get_client()
        if args.action == "status":
            for cfg in archives:
                for line in rpo(s3, cfg, int(time.time() * 1000)):
                    print(f"{cfg.name}: {line.line()}")
            return 0
        if not (args.target_bootstrap or os.environ.get("S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS")):
            raise KafkaUnavailable("set --target-bootstrap or S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS")
        overrides = {"bootstrap_servers": args.target_bootstrap} if args.target_bootstrap else {}
        with dg.build_resources({"kafka": kafka_resource()}) as kres:
            target = kres.kafka.model_copy(update=overrides)
            options = RecoveryOptions(args.action == "recover", tuple(args.topic) if args.topic else None,
                                      args.as_of_ms, args.allow_config_changes, skip_groups=tuple(args.skip_group))
            try:
                report = Recovery(archives, target, s3, _Print(), options).run()
            finally:
                target.close()
    for line in report.lines():
        print(line)
    return 0


class _Print:
    """The recovery's log on the terminal."""

    def info(self, msg: str) -> None:
        print(msg)

    def warning(self, msg: str) -> None:
        print(f"warning: {msg}", file=sys.stderr)

    debug = info
    error = warning


def _dr_arguments(dr: argparse.ArgumentParser) -> None:
    dr.add_argument("action", choices=["status", "plan", "recover"])
    dr.add_argument("--config", type=Path, help=_CONFIG_HELP)
    dr.add_argument("--archive", action="append", default=[], help="only this archive (repeatable)")
    dr.add_argument("--topic", action="append", default=[], help="only this archived topic (repeatable)")
    dr.add_argument("--target-bootstrap", help="the target cluster (default $S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS)")
    dr.add_argument("--as-of-ms", type=int, help="point in time: the newest group snapshot at or before it")
    dr.add_argument("--allow-config-changes", action="store_true",
                    help="restore into existing topics whose cleanup.policy or timestamp type differ")
    dr.add_argument("--skip-group", action="append", default=[], help="leave this group's offsets alone")


def import_connect_command(file: Path, out: Path | None, name: str | None, take_over: bool = False) -> int:
    """`s3-archive import-connect FILE`: the archive YAML for a Kafka Connect S3 sink config."""
    from s3_archive.config.connect_import.convert import import_connect

    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text()
    except OSError as e:
        raise UnsupportedConnectConfig(f"cannot read {file}: {e.strerror}") from None
    yaml_text = import_connect(text, name=name, source="stdin" if str(file) == "-" else file.name,
                               take_over_group=take_over)
    if out is None:
        sys.stdout.write(yaml_text)
    else:
        out.write_text(yaml_text)
        print(f"wrote {out}", file=sys.stderr)
    return 0


# --kafka-security, of `local up` and of `demo`
_KAFKA_SECURITY = {
    "choices": ["plaintext", "sasl_ssl"], "default": None,
    "help": "up: the broker's listener: plaintext, or sasl_ssl (SCRAM-SHA-512 user 's3-archive', TLS with a local "
            "CA; the variables are in stack.env). Default: as the local data was made, else plaintext"}
_CONFIG_HELP = ("archives YAML, or a defs folder of KafkaArchive declarations (default: $S3_ARCHIVE_CONFIG or the "
                "demo's)")


def _config_path(args: argparse.Namespace) -> Path:
    return args.config or Path(os.environ.get("S3_ARCHIVE_CONFIG", DEMO_CONFIG))


def _local_arguments(local: argparse.ArgumentParser) -> None:
    local.add_argument("action", choices=["up", "down", "status"])
    local.add_argument("--fresh", action="store_true", help="up: wipe the local data first")
    local.add_argument("--purge", action="store_true",
                       help="down: then remove all local data (broker topics, the bucket, the demo's Dagster "
                            "instance and topic state); the next `up` or `make demo` starts from nothing")
    local.add_argument("--kafka-port", type=int, default=0, help="up: broker port (default: a free one)")
    local.add_argument("--s3-port", type=int, default=0, help="up: moto port (default: a free one)")
    local.add_argument("--kafka-security", **_KAFKA_SECURITY)
    local.add_argument("--postgres", action="store_true",
                       help="up: also PostgreSQL for a Dagster instance of the deployed shape "
                            "(deploy/dagster.postgres.yaml)")
    local.add_argument("--spark-connect", action="store_true",
                       help="up: also a Spark Connect server (pyspark's own, with the project's jars); on the "
                            "cluster with --spark-cluster")
    local.add_argument("--spark-cluster", action="store_true",
                       help="up: also a Spark standalone master and one worker (pyspark's own)")
    local.add_argument("--spark-connect-port", type=int, default=0,
                       help="up: Spark Connect port (default: a free one)")
    local.add_argument("--schema-registry", action="store_true",
                       help="up: also start a Schema Registry (Apicurio Registry, Confluent-compatible API) for "
                            "registry decoding (S3_ARCHIVE_SCHEMA_REGISTRY_URL in stack.env)")
    local.add_argument("--schema-registry-port", type=int, default=0,
                       help="up: the Schema Registry's port (default: a free one)")
    local.add_argument("--spark-master-port", type=int, default=0,
                       help="up: Spark master port (default: a free one)")


def local_command(args: argparse.Namespace) -> int:
    """`s3-archive local up | down | status`."""
    from s3_archive.local import stack

    if args.action == "up":
        stack.up(options=stack.StackOptions(
            fresh=args.fresh, kafka_port=args.kafka_port, s3_port=args.s3_port, kafka_security=args.kafka_security,
            postgres=args.postgres, spark_connect=args.spark_connect, spark_connect_port=args.spark_connect_port,
            spark_cluster=args.spark_cluster, spark_master_port=args.spark_master_port,
            schema_registry=args.schema_registry, schema_registry_port=args.schema_registry_port))
        print(stack.status())
        print(f"environment for the project: source {local_stack_dir() / 'stack.env'}")
    elif args.action == "down":
        stopped = stack.down(purge=args.purge)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        if args.purge:
            print(f"removed {local_stack_dir()}")
    else:
        print(stack.status())
    return 0


def _demo_arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--port", type=int, default=3000)
    demo.add_argument("--kafka-security", **_KAFKA_SECURITY)


def demo_command(args: argparse.Namespace) -> int:
    from s3_archive.local import demo

    return demo.run(port=args.port, kafka_security=args.kafka_security)


def _refresh_arguments(refresh: argparse.ArgumentParser) -> None:
    refresh.add_argument("--config", type=Path, help=_CONFIG_HELP)
    refresh.add_argument("--forget", metavar="TOPIC", action="append", default=[],
                         help="instead of refreshing, remove TOPIC from the known topics (repeatable; no Kafka "
                              "connection). A topic that still exists and matches comes back at the next refresh")


def _iam_arguments(iam: argparse.ArgumentParser) -> None:
    iam.add_argument("--config", type=Path, help=_CONFIG_HELP)
    iam.add_argument("--region", default="*")
    iam.add_argument("--account-id", default="*")
    iam.add_argument("--governance-bypass", action="store_true",
                     help="also grant s3:BypassGovernanceRetention on the objects of archives with retention_lock "
                          "mode governance (lets the holder shorten or remove their locks; off by default)")
    iam.add_argument("--erasure", action="store_true",
                     help="also grant what `s3-archive erase` needs: the bucket's versioning read, and old object "
                          "versions listed and deleted (off by default)")


def iam_policy_command(args: argparse.Namespace) -> int:
    """`s3-archive iam-policy`: the least-privilege IAM policy of the configured archives, as JSON."""
    from s3_archive.config.settings import load_settings
    from s3_archive.iam import iam_policy

    print(json.dumps(iam_policy(load_settings(_config_path(args)), region=args.region, account_id=args.account_id,
                                governance_bypass=args.governance_bypass, erasure=args.erasure), indent=2))
    return 0


def _verify_arguments(verify: argparse.ArgumentParser) -> None:
    verify.add_argument("--config", type=Path, help=_CONFIG_HELP)
    verify.add_argument("--topic", required=True, help="a topic of a configured archive")
    verify.add_argument("--full", action="store_true",
                        help="read every window (default: the next ones of the daily check's rotation, within its "
                             "verify.bytes_per_run)")


def verify_command(args: argparse.Namespace) -> int:
    """`s3-archive verify --topic T [--full]`: the `verify` check on demand, with the runs' S3 settings
    ($S3_ARCHIVE_S3_*). Exit status 0: nothing differs; 2: something does (each finding printed)."""
    import dagster as dg

    from s3_archive.archive.verify import verify_topic
    from s3_archive.defs.resources import s3_resource

    cfg = _archive_of(args)
    with dg.build_resources({"s3": s3_resource()}) as resources:  # resources.s3: the resource's boto3 client
        report = verify_topic(resources.s3, cfg, args.topic, full=args.full)
    for f in report.findings:
        print(f.text(report.bucket))
    print(f"{args.topic}: {len(report.read)} of {report.windows} window(s) read, {report.bytes_read} bytes in "
          f"{report.seconds:.1f} s ({report.mb_per_s:.1f} MB/s); {len(report.failures)} finding(s), "
          f"{len(report.unhashed_windows)} unhashed window(s)" + ("" if args.full else
                                                               f"; rotation kept in s3://{report.bucket}/"
                                                               f"{report.state_key}"))
    return 2 if report.failures else 0


def _archive_of(args: argparse.Namespace) -> ArchiveConfig:
    """The configured archive of `--topic`."""
    from s3_archive.config.settings import load_settings, resolve_topic_patterns
    from s3_archive.io.paths import topic_state_file
    from s3_archive.io.topic_state import read_known_topics

    settings = load_settings(_config_path(args))
    if any(a.topic_pattern for a in settings.archives):
        settings = resolve_topic_patterns(settings, read_known_topics(topic_state_file()))
    try:
        return settings.archive_for(args.topic)
    except KeyError:
        known = sorted(t for a in settings.archives for t in a.topics)
        raise InvalidConfig(f"--topic {args.topic!r} is not a topic of any configured archive; known topics: "
                            f"{', '.join(known) or 'none'}") from None


def _erase_arguments(erase: argparse.ArgumentParser) -> None:
    erase.add_argument("--config", type=Path, help=_CONFIG_HELP)
    erase.add_argument("--topic", required=True, help="a topic of a configured archive")
    erase.add_argument("--key", action="append", default=[], help="erase the records with this key (UTF-8; "
                                                                   "repeat for several keys)")
    erase.add_argument("--key-hex", action="append", default=[], help="a key given as hexadecimal (for keys that "
                                                                       "are not text; repeatable)")
    erase.add_argument("--key-base64", action="append", default=[], help="a key given as base64 (repeatable)")
    erase.add_argument("--field", help="erase the records whose decoded field (a column of the objects) equals "
                                       "--equals (instead of --key)")
    erase.add_argument("--equals", help="with --field: the value, as JSON (42, true, \"text\") or else as text")
    erase.add_argument("--dry-run", action="store_true", help="count what would be erased; write nothing")


def erase_command(args: argparse.Namespace) -> int:
    """`s3-archive erase --topic T --key K [--key K2] [--key-hex H] [--key-base64 B] [--dry-run]`: the `erase` job
    on demand, with the runs' S3 settings ($S3_ARCHIVE_S3_*). Prints each window rewritten, the audit record's key
    and those of interrupted erasures' records it completed; emits the run's lineage as the job does."""
    import logging
    import uuid

    import dagster as dg

    from s3_archive.defs.resources import s3_resource, spark_resource
    from s3_archive.erasure.erase_lineage import traced_erase
    from s3_archive.erasure.erasure import EraseRequest, FieldEquals, parse_equals, parse_key
    from s3_archive.erasure.iceberg_erase import TableSession
    from s3_archive.io.iceberg_catalog import S3Endpoint
    from s3_archive.model.errors import ErasureRefused

    cfg = _archive_of(args)
    if (args.field is None) != (args.equals is None):
        raise InvalidConfig("--field and --equals go together (a predicate: the field's value equals this)")
    try:
        keys = [*(parse_key(k, "utf8") for k in args.key), *(parse_key(k, "hex") for k in args.key_hex),
                *(parse_key(k, "base64") for k in args.key_base64)]
        request = EraseRequest(args.topic, tuple(keys),
                               FieldEquals(args.field, parse_equals(args.equals)) if args.field else None)
        spark = cfg.format == "iceberg" and not args.dry_run  # its erasure commits to the table through Spark
        with dg.build_resources({"s3": s3_resource(), **({"spark": spark_resource()} if spark else {})}) as res:
            endpoint = S3Endpoint.of_resource(s3_resource().process_config_and_initialize())  # its Glue endpoint
            table = TableSession(res.spark.session(), endpoint) if spark else None
            report = traced_erase(res.s3, cfg, request, str(uuid.uuid4()), logging.getLogger("s3_archive.erase"),
                                  dry_run=args.dry_run, table=table)
    except ErasureRefused as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for w in report.erased:
        print(f"window {w.window}: {w.records} record(s) " + ("to erase" if report.dry_run
                                                              else f"erased, generation {w.generation}"))
    print(f"{args.topic}: {report.records} record(s) {'would be ' if report.dry_run else ''}erased in "
          f"{len(report.erased)} of {report.windows_read} window(s)"
          + (f"; audit record s3://{cfg.bucket}/{report.audit_key}" if report.audit_key else ""))
    for key in report.completed:
        print(f"completed the audit record of an interrupted erasure: s3://{cfg.bucket}/{key}")
    return 0


def _import_arguments(imp: argparse.ArgumentParser) -> None:
    imp.add_argument("file", type=Path, help="the connector's config: JSON (bare or the REST shape), a properties "
                                             "file, or KCQL; '-' reads stdin")
    imp.add_argument("--out", type=Path, help="write the YAML here instead of stdout")
    imp.add_argument("--name", help="the archive's name (default: from the connector's name)")
    imp.add_argument("--take-over", action="store_true",
                     help="continue where the connector stopped: start at its consumer group's offsets, and read "
                          "its objects back as a foreign source of the archive (docs/import-connect.md, "
                          "\"Taking over\")")


def _print_written(config: Path, out: Path) -> int:
    from s3_archive.components import write_components

    for path in write_components(config, out):
        print(f"wrote {path}")
    return 0


class Command(NamedTuple):
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# Every subcommand: its help, its arguments, what it runs.
COMMANDS: dict[str, Command] = {
    "local": Command("the embedded Kafka broker + moto S3/Glue/Athena server", _local_arguments, local_command),
    "demo": Command("local stack + demo topics + archived windows + dagster dev", _demo_arguments, demo_command),
    "refresh-topics": Command(
        "add the Kafka topics each topic_pattern now matches to the topic state (read when definitions load), "
        "with the runs' Kafka settings ($S3_ARCHIVE_KAFKA_*)", _refresh_arguments,
        lambda args: refresh_topics_command(_config_path(args), args.forget)),
    "iam-policy": Command("print the least-privilege IAM policy for the configured archives", _iam_arguments,
                          iam_policy_command),
    "dr": Command("disaster recovery: the RPO of each topic and group (status), a cluster's recovery planned (plan) "
                  "or done (recover) (docs/disaster-recovery.md)", _dr_arguments, dr_command),
    "verify": Command("check an archive's windows against their manifests: objects hashed, manifests' chain walked "
                      "(docs/compliance.md)", _verify_arguments, verify_command),
    "erase": Command("erase records (by key, or a decoded field's value) from every window of an archived topic "
                     "that holds them (docs/compliance.md)", _erase_arguments, erase_command),
    "import-connect": Command(
        "turn a Kafka Connect S3 sink config (Aiven or Confluent JSON, Lenses KCQL) into an archive YAML block "
        "(docs/import-connect.md)", _import_arguments,
        lambda args: import_connect_command(args.file, args.out, args.name, args.take_over)),
    "metrics": Command("serve the archives' metrics for Prometheus (docs/metrics.md)", metrics_arguments,
                       metrics_command),
    "components": Command(
        "write each archive of a config file as a KafkaArchive component's defs.yaml (docs/components.md)",
        lambda p: (p.add_argument("config", type=Path), p.add_argument("--out", type=Path, required=True,
                                                                        help="the project's defs folder")),
        lambda args: _print_written(args.config, args.out)),
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="s3-archive", description=__doc__)
    sub = top.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        command.arguments(sub.add_parser(name, help=command.help))
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return COMMANDS[args.command].run(args)
    except (StackError, MissingJars, InvalidConfig, TopicStateUnreadable, UnsupportedConnectConfig,
            InvalidRestore) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KafkaUnavailable as e:  # refresh-topics and dr reach Kafka
        print(f"error: {e}" + ("; the known topics are unchanged" if args.command == "refresh-topics" else ""),
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
