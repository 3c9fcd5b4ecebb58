"""`s3-archive metrics serve`: the exporter's arguments and its start (metrics/exporter.py)."""

from __future__ import annotations

import argparse
import os
import sys


def metrics_arguments(metrics: argparse.ArgumentParser) -> None:
    sub = metrics.add_subparsers(dest="metrics_command", required=True)
    serve = sub.add_parser("serve", help="serve the archives' metrics over HTTP for Prometheus (docs/metrics.md)")
    serve.add_argument("--port", type=int, default=9464, help="the HTTP port (default 9464)")
    serve.add_argument("--host", default="0.0.0.0", help="the address to listen on (default all)")
    serve.add_argument("--interval", type=float, default=30.0,
                       help="seconds between refreshes: reads of the instance and Kafka (default 30, at least 1)")
    serve.add_argument("--store-probe-interval", type=float, default=3600.0,
                       help="seconds between probes of each bucket's conditional writes (12 S3 requests a bucket, "
                            "under the archive's prefix; default 3600, at least 60; 0: never probed)")


def metrics_command(args: argparse.Namespace) -> int:
    """Serve until stopped. The config is `$S3_ARCHIVE_CONFIG` (the demo's by default), the instance
    `$DAGSTER_HOME`'s, Kafka and S3 the runs' (`$S3_ARCHIVE_KAFKA_*`, `$S3_ARCHIVE_S3_*`)."""
    from pathlib import Path

    import dagster as dg

    from s3_archive.config.settings import load_settings, resolve_topic_patterns
    from s3_archive.defs.resources import kafka_resource, s3_resource
    from s3_archive.io.paths import topic_state_file
    from s3_archive.io.topic_state import read_known_topics
    from s3_archive.metrics.exporter import ArchiveCollector, StoreProbe, serve
    from s3_archive.model.errors import InvalidConfig

    if args.interval < 1:
        raise InvalidConfig(f"--interval must be at least 1 second, got {args.interval:g}")
    if args.store_probe_interval != 0 and args.store_probe_interval < 60:
        raise InvalidConfig(f"--store-probe-interval must be 0 (never) or at least 60 seconds, got "
                            f"{args.store_probe_interval:g}")
    for var, why in [("S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS", "the Kafka the archives read"),
                     ("DAGSTER_HOME", "the Dagster instance the runs record in")]:
        if not os.environ.get(var):
            raise InvalidConfig(f"${var} is not set: the exporter needs {why}")
    # The demo's declarations, as the definitions load them (definitions.DEMO_CONFIG, without loading definitions).
    demo = Path(__file__).parents[1] / "local" / "demo_defs"
    settings = load_settings(Path(os.environ.get("S3_ARCHIVE_CONFIG", demo)))
    if any(a.topic_pattern is not None for a in settings.archives):
        settings = resolve_topic_patterns(settings, read_known_topics(topic_state_file()))
    instance = dg.DagsterInstance.get()
    with dg.build_resources({"kafka": kafka_resource(), "s3": s3_resource()}) as resources:
        s3 = resources.s3  # the client; the probe writes and removes one object under each archive's prefix
        store = StoreProbe(lambda: s3, args.store_probe_interval) if args.store_probe_interval else None
        collector = ArchiveCollector(settings, lambda: instance, resources.kafka,
                                     log=lambda line: print(line, file=sys.stderr, flush=True), store=store)
        serve(collector, args.port, args.host, args.interval)
    return 0
