"""`s3-archive`: the local stack, the demo, the topics of `topic_pattern`s, the IAM policy, and Kafka Connect S3
sink configs imported as archives."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from s3_archive.io.paths import local_stack_dir
from s3_archive.local.processes import StackError
from s3_archive.model.errors import (
    InvalidConfig,
    KafkaUnavailable,
    MissingJars,
    TopicStateUnreadable,
    UnsupportedConnectConfig,
)

# The packaged demo config (kept in sync with definitions.DEMO_CONFIG without importing all definitions).
DEMO_CONFIG = Path(__file__).parent / "local" / "demo_archives.yaml"


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="s3-archive", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    local = sub.add_parser("local", help="the embedded Kafka broker + moto S3/Glue/Athena server")
    local.add_argument("action", choices=["up", "down", "status"])
    local.add_argument("--fresh", action="store_true", help="up: wipe the local data first")
    local.add_argument("--purge", action="store_true",
                       help="down: then remove all local data (broker topics, the bucket, the demo's Dagster "
                            "instance and topic state); the next `up` or `make demo` starts from nothing")
    local.add_argument("--kafka-port", type=int, default=0, help="up: broker port (default: a free one)")
    local.add_argument("--s3-port", type=int, default=0, help="up: moto port (default: a free one)")
    security = {"choices": ["plaintext", "sasl_ssl"], "default": None,
                "help": "up: the broker's listener: plaintext, or sasl_ssl (SCRAM-SHA-512 user 's3-archive', TLS "
                        "with a local CA; the variables are in stack.env). Default: as the local data was made, "
                        "else plaintext"}
    local.add_argument("--kafka-security", **security)
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
    demo = sub.add_parser("demo", help="local stack + demo topics + archived windows + dagster dev")
    demo.add_argument("--port", type=int, default=3000)
    demo.add_argument("--kafka-security", **security)
    refresh = sub.add_parser(
        "refresh-topics", help="add the Kafka topics each topic_pattern now matches to the topic state (read "
                               "when definitions load), with the runs' Kafka settings ($S3_ARCHIVE_KAFKA_*)")
    refresh.add_argument("--config", type=Path, help="archives YAML (default: $S3_ARCHIVE_CONFIG or the demo config)")
    refresh.add_argument("--forget", metavar="TOPIC", action="append", default=[],
                         help="instead of refreshing, remove TOPIC from the known topics (repeatable; no Kafka "
                              "connection). A topic that still exists and matches comes back at the next refresh")
    iam = sub.add_parser("iam-policy", help="print the least-privilege IAM policy for the configured archives")
    iam.add_argument("--config", type=Path, help="archives YAML (default: $S3_ARCHIVE_CONFIG or the demo config)")
    iam.add_argument("--region", default="*")
    iam.add_argument("--account-id", default="*")
    imp = sub.add_parser("import-connect", help="turn a Kafka Connect S3 sink config (Aiven or Confluent JSON, "
                                                "Lenses KCQL) into an archive YAML block (docs/import-connect.md)")
    imp.add_argument("file", type=Path, help="the connector's config: JSON (bare or the REST shape), a properties "
                                             "file, or KCQL; '-' reads stdin")
    imp.add_argument("--out", type=Path, help="write the YAML here instead of stdout")
    imp.add_argument("--name", help="the archive's name (default: from the connector's name)")
    imp.add_argument("--take-over", action="store_true",
                     help="continue where the connector stopped: start at its consumer group's offsets, and read "
                          "its objects back as a foreign source of the archive (docs/import-connect.md, "
                          "\"Taking over\")")
    args = parser.parse_args(argv)

    from s3_archive.local import stack

    try:
        if args.command == "local" and args.action == "up":
            stack.up(fresh=args.fresh, kafka_port=args.kafka_port, s3_port=args.s3_port,
                     kafka_security=args.kafka_security, postgres=args.postgres,
                     spark_connect=args.spark_connect, spark_cluster=args.spark_cluster,
                     spark_connect_port=args.spark_connect_port, spark_master_port=args.spark_master_port,
                     schema_registry=args.schema_registry, schema_registry_port=args.schema_registry_port)
            print(stack.status())
            print(f"environment for the project: source {local_stack_dir() / 'stack.env'}")
        elif args.command == "local" and args.action == "down":
            stopped = stack.down(purge=args.purge)
            print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
            if args.purge:
                print(f"removed {local_stack_dir()}")
        elif args.command == "local":
            print(stack.status())
        elif args.command == "refresh-topics":
            path = args.config or Path(os.environ.get("S3_ARCHIVE_CONFIG", DEMO_CONFIG))
            return refresh_topics_command(path, args.forget)
        elif args.command == "iam-policy":
            from s3_archive.config.settings import load_settings
            from s3_archive.iam import iam_policy

            path = args.config or Path(os.environ.get("S3_ARCHIVE_CONFIG", DEMO_CONFIG))
            print(json.dumps(iam_policy(load_settings(path), region=args.region, account_id=args.account_id),
                             indent=2))
        elif args.command == "import-connect":
            return import_connect_command(args.file, args.out, args.name, args.take_over)
        elif args.command == "demo":
            from s3_archive.local import demo as demo_mod

            return demo_mod.run(port=args.port, kafka_security=args.kafka_security)
    except (StackError, MissingJars, InvalidConfig, TopicStateUnreadable, UnsupportedConnectConfig) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KafkaUnavailable as e:  # only refresh-topics reaches Kafka
        print(f"error: {e}; the known topics are unchanged", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
