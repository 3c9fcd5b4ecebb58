"""Dagster's GraphQL API as the UI uses it, for the e2e tests (a `dagster dev`, the deployed webserver, the demo)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import dagster as dg

from s3_archive.defs.archive.partitions import window_partitions
from s3_archive.model.windows import OffsetWindow

LOCATION = {"repositoryLocationName": "s3_archive", "repositoryName": "__repository__"}


def graphql(url: str, query: str, variables: dict | None = None) -> dict:
    req = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": query, "variables": variables or {}})
                                 .encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        body = json.loads(r.read())
    assert "errors" not in body, body
    return body["data"]


def start_sensor(url: str, name: str) -> None:
    started = graphql(url, """
        mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) {
          __typename ... on Sensor { sensorState { status } } ... on PythonError { message } } }""",
                      {"s": {**LOCATION, "sensorName": name}})["startSensor"]
    assert started["__typename"] == "Sensor" and started["sensorState"]["status"] == "RUNNING", started


def sensor_ticks(url: str, name: str) -> list[dict]:
    """The sensor's ticks, oldest first: timestamp (its start), endTimestamp (None while it runs), status and skip
    reason."""
    got = graphql(url, """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) { ... on Sensor {
        sensorState { ticks(limit: 100) { timestamp endTimestamp status skipReason } } } } }""",
                  {"s": {**LOCATION, "sensorName": name}})["sensorOrError"]
    return sorted(got["sensorState"]["ticks"], key=lambda t: t["timestamp"])


def archive_assets(url: str) -> set[str]:
    nodes = graphql(url, "{ assetNodes { assetKey { path } } }")["assetNodes"]
    return {n["assetKey"]["path"][-1] for n in nodes if n["assetKey"]["path"][0] == "kafka_archive"}


def launch_backfill(url: str, home: str | Path, topic: str, windows: list[OffsetWindow]) -> str:
    """Add `windows` as partitions of the topic's archive in the instance at `home`, then launch a backfill of them
    as the UI's "Materialize partitions" does; its id."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(window_partitions(topic).name, [w.key for w in windows])
    launched = graphql(url, """
        mutation($p: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $p) {
          __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }""",
                       {"p": {"partitionNames": [w.key for w in windows],
                              "assetSelection": [{"path": ["kafka_archive", topic]}]}})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    return launched["backfillId"]
