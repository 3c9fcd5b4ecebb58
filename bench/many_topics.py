"""A `topic_pattern` matching many topics (the page's "Many topics"): `MANY_TOPICS` topics of 4 partitions, created on
the bench's broker, each with a few records. Measured: one tick of the topic discovery sensor finding them all (and
one finding nothing new), loading the code location's definitions with all of them in a fresh process (as a code
server does at a reload), one tick of the archive's offsets sensor over them (no cursor: every topic's keys read, 100
windows cut; then the steady tick with its cursor, upkeep included), and the UI's asset catalog query answered by a
dagster-webserver over them. Target: each under `MANY_TOPICS_TARGET_S` (bench/config.py); the page's section is
bench/many_topics_page.py.

    .venv/bin/python -m bench.many_topics [--topics 1000] [--json FILE]   # its own broker and moto
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from bench.common import say
from bench.config import BUCKET, MANY_TOPICS, MANY_TOPICS_PARTITIONS, ROOT
from bench.many_topics_page import RECORDS_PER_PARTITION
from bench.under_test import (
    LOCAL_AWS,
    KafkaResource,
    S3Resource,
    WebserverResource,
    build_offsets_sensor,
    build_topic_discovery_sensor,
    free_port,
    local_s3_client,
    parse_settings,
    read_known_topics,
    resolve_topic_patterns,
    temporary_stack,
)

PATTERN = r"many\..*"
CATALOG_QUERY = """{ assetsOrError { __typename ... on AssetConnection { nodes { key { path }
    definition { groupName description partitionDefinition { description } } } } } }"""


def topic_names(n: int) -> list[str]:
    return [f"many.{i:05d}" for i in range(n)]


def create_topics(kafka: KafkaResource, names: list[str]) -> None:
    """The topics, 200 per CreateTopics request, and a few records in each partition."""
    from confluent_kafka.admin import NewTopic

    admin = kafka.admin()
    for i in range(0, len(names), 200):
        futures = admin.create_topics([NewTopic(t, MANY_TOPICS_PARTITIONS, 1) for t in names[i:i + 200]])
        for f in futures.values():
            f.result(timeout=120)
    producer = kafka.producer(**{"linger.ms": 50})
    for t in names:
        for p in range(MANY_TOPICS_PARTITIONS):
            for _ in range(RECORDS_PER_PARTITION):
                producer.produce(t, value=b"x", partition=p)
        producer.poll(0)
    producer.flush(120)


def config(prefix: str = "many/") -> dict[str, Any]:
    return {"archives": [{"name": "many", "topic_pattern": PATTERN, "bucket": BUCKET, "prefix": prefix,
                          "flush": {"count": RECORDS_PER_PARTITION, "interval_seconds": None}}]}


def time_discovery(kafka: KafkaResource, settings: Any) -> dict[str, float]:
    import dagster as dg

    out = {}
    for name, loaded in (("discovery_tick_s", {}), ("discovery_tick_nothing_new_s", None)):
        sensor = build_topic_discovery_sensor(settings, loaded)
        with dg.build_sensor_context(resources={"kafka": kafka, "webserver": WebserverResource()}) as ctx:
            t = time.monotonic()
            skip = sensor(ctx)
            out[name] = time.monotonic() - t
        say(f"discovery tick: {out[name]:.2f}s ({skip.skip_message[:100]})")
    return out


def time_definitions(env: dict[str, str]) -> dict[str, Any]:
    """`s3_archive.definitions` imported in a fresh process (what a code server does at a (re)load)."""
    code = ("import time; t = time.monotonic(); import s3_archive.definitions as d; s = time.monotonic() - t; "
            "import json; print(json.dumps({'s': s, 'assets': len(list(d.defs.resolve_all_asset_specs()))}))")
    t = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=600, check=True)
    wall = time.monotonic() - t
    got = json.loads(done.stdout.strip().splitlines()[-1])
    say(f"definitions load: {got['s']:.2f}s ({got['assets']} assets; process {wall:.1f}s)")
    return {"definitions_load_s": got["s"], "definitions_process_s": wall, "assets": got["assets"]}


def time_offsets_ticks(kafka: KafkaResource, s3_endpoint: str, settings: Any, known: dict[str, list[str]],
                       ) -> dict[str, Any]:
    import dagster as dg

    (cfg,) = resolve_topic_patterns(settings, known).archives
    s3 = S3Resource(endpoint_url=s3_endpoint, region_name=LOCAL_AWS["AWS_REGION"],
                    aws_access_key_id=LOCAL_AWS["AWS_ACCESS_KEY_ID"],
                    aws_secret_access_key=LOCAL_AWS["AWS_SECRET_ACCESS_KEY"])
    sensor = build_offsets_sensor(cfg)
    out: dict[str, Any] = {"topics": len(cfg.topics)}
    with dg.instance_for_test() as instance:
        cursor = None
        for name in ("offsets_tick_first_s", "offsets_tick_steady_s"):
            with dg.build_sensor_context(instance=instance, resources={"kafka": kafka, "s3": s3},
                                         cursor=cursor) as ctx:
                t = time.monotonic()
                result = sensor(ctx)
                out[name] = time.monotonic() - t
            for req in result.dynamic_partitions_requests or []:  # as the daemon does
                instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
            cut = sum(len(r.partition_keys) for r in result.dynamic_partitions_requests or [])
            out[name.removesuffix("_s") + "_windows"] = cut
            say(f"offsets sensor tick ({name}): {out[name]:.2f}s, {cut} windows cut")
            cursor = result.cursor
    return out


def time_catalog(env: dict[str, str], home: Path) -> dict[str, Any]:
    """A dagster-webserver over the code location: start-up until it answers, then the asset catalog's query."""
    port = free_port()
    log = open(home / "webserver.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "dagster_webserver", "-h", "127.0.0.1", "-p", str(port),
                             "-w", str(ROOT / "workspace.yaml")], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        t = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"dagster-webserver exited: {(home / 'webserver.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/server_info", timeout=2):
                    break
            except OSError:
                if time.monotonic() - t > 600:
                    raise RuntimeError("dagster-webserver did not answer within 600 s") from None
                time.sleep(0.5)
        up = time.monotonic() - t
        secs, nodes = [], 0
        for _ in range(3):
            req = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": CATALOG_QUERY}).encode(),
                                         headers={"Content-Type": "application/json"})
            t = time.monotonic()
            with urllib.request.urlopen(req, timeout=600) as r:
                body = json.loads(r.read())
            secs.append(time.monotonic() - t)
            nodes = len(body["data"]["assetsOrError"]["nodes"])
        say(f"asset catalog: {nodes} assets in {min(secs):.2f} / {max(secs):.2f}s (webserver up in {up:.1f}s)")
        return {"webserver_up_s": up, "catalog_query_s": secs, "catalog_assets": nodes}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def run(kafka: KafkaResource, s3_endpoint: str, topics: int = MANY_TOPICS) -> dict[str, Any]:
    """Every figure of the section against a broker and moto that run already (the bench's)."""
    say(f"many topics: creating {topics} topics of {MANY_TOPICS_PARTITIONS} partitions")
    t = time.monotonic()
    create_topics(kafka, topic_names(topics))
    out: dict[str, Any] = {"topics_wanted": topics, "create_s": time.monotonic() - t}
    with tempfile.TemporaryDirectory(prefix="s3a-many-") as tmp:
        home = Path(tmp)
        (home / "archives.yaml").write_text(yaml.safe_dump(config()))
        (home / "dagster_home").mkdir()
        before = os.environ.get("S3_ARCHIVE_STATE_DIR")
        os.environ["S3_ARCHIVE_STATE_DIR"] = str(home / "state")  # the discovery tick runs in this process
        try:
            env = {**os.environ, "S3_ARCHIVE_CONFIG": str(home / "archives.yaml"),
                   "S3_ARCHIVE_STATE_DIR": str(home / "state"), "DAGSTER_HOME": str(home / "dagster_home"),
                   "S3_ARCHIVE_KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
                   "S3_ARCHIVE_S3_ENDPOINT_URL": s3_endpoint}
            settings = parse_settings(config())
            out |= time_discovery(kafka, settings)
            known = read_known_topics(home / "state" / "topics.json")
            out |= time_definitions(env)
            out |= time_offsets_ticks(kafka, s3_endpoint, settings, known)
            out |= time_catalog(env, home)
        finally:
            if before is None:
                os.environ.pop("S3_ARCHIVE_STATE_DIR", None)
            else:
                os.environ["S3_ARCHIVE_STATE_DIR"] = before
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=MANY_TOPICS)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    with temporary_stack("s3a-many-", BUCKET) as (broker, moto, _):
        local_s3_client(moto.endpoint_url)
        out = run(KafkaResource(bootstrap_servers=broker.bootstrap_servers, timeout_s=60), moto.endpoint_url,
                  args.topics)
    text = json.dumps(out, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

