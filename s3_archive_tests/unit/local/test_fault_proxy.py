"""The fault proxy's pure parts: rules, the mixed share, operation names; and the retry settings it exercises."""

from __future__ import annotations

import random

import pytest

from s3_archive.archive.protocol import S3Connection
from s3_archive.io.s3_resource import S3Resource
from s3_archive.local.fault_proxy import KINDS, FaultRule, _State, mixed, operation
from s3_archive.model.errors import InvalidConfig


def test_mixed_faults_hit_the_share_evenly_over_the_kinds():
    state = _State()
    state.configure(mixed(0.10), seed=7)
    picks = [state.pick("GET", "/b/k", {}, {}) for _ in range(40_000)]
    for kind in KINDS:
        assert picks.count(kind) / len(picks) == pytest.approx(0.025, abs=0.004)
    assert state.stats()["requests"] == 40_000


def test_a_rule_filters_by_method_query_header_and_path_and_stops_after_times():
    state = _State()
    state.configure([FaultRule("lost", method="PUT", header="If-None-Match", path="/_manifests/", times=1)], 0)
    assert state.pick("PUT", "/b/p/_manifests/t/w.json", {}, {}) is None  # no If-None-Match
    assert state.pick("GET", "/b/p/_manifests/t/w.json", {}, {"If-None-Match": "*"}) is None
    assert state.pick("PUT", "/b/p/_manifests/t/w.json", {}, {"If-None-Match": "*"}) == "lost"
    assert state.pick("PUT", "/b/p/_manifests/t/w.json", {}, {"If-None-Match": "*"}) is None  # times=1
    state.configure([FaultRule("slowdown", method="POST", query="uploadId")], 0)
    assert state.pick("POST", "/b/k", {"uploads": ""}, {}) is None
    assert state.pick("POST", "/b/k", {"uploadId": "x"}, {}) == "slowdown"


def test_the_same_seed_gives_the_same_faults():
    def run(seed: int) -> list:
        state = _State()
        state.configure(mixed(0.3), seed)
        return [state.pick("GET", "/b/k", {}, {}) for _ in range(500)]

    assert run(3) == run(3) != run(4)


def test_operation_names_what_s3_does():
    assert operation("PUT", {"uploadId": "u", "partNumber": "1", "x-id": "UploadPart"}, {}) == "PUT ?partNumber,uploadId"
    assert operation("PUT", {}, {"If-None-Match": "*"}) == "PUT If-None-Match"
    assert operation("POST", {"delete": ""}, {}) == "POST ?delete"
    assert operation("GET", {"list-type": "2", "prefix": "a/"}, {}) == "GET ?list-type"


def test_a_bad_rule_is_refused():
    with pytest.raises(ValueError, match="'gone' is not one of slowdown, internal, reset, lost"):
        FaultRule("gone")
    with pytest.raises(ValueError, match="share 2"):
        FaultRule("reset", share=2)


def test_the_s3_resource_s_retries_reach_the_executors_and_are_checked():
    res = S3Resource(region_name="us-east-1", max_attempts=9, retry_mode="adaptive")
    assert res.get_client().meta.config.retries == {"mode": "adaptive", "total_max_attempts": 10}
    conn = S3Connection.of_resource(res)
    assert (conn.max_attempts, conn.retry_mode) == (9, "adaptive")
    assert (S3Connection.of_client(res.get_client()).max_attempts, conn.retry_mode) == (9, "adaptive")
    assert conn.client().meta.config.retries == {"mode": "adaptive", "total_max_attempts": 10}
    with pytest.raises(InvalidConfig, match=r"retry mode 'fast' \(\$S3_ARCHIVE_S3_RETRY_MODE\).*standard, adaptive"):
        S3Resource(retry_mode="fast").check()


def test_random_is_not_shared_between_states():
    a, b = _State(), _State()
    a.configure(mixed(0.5), 1)
    b.configure(mixed(0.5), 1)
    random.seed(0)
    assert [a.pick("GET", "/", {}, {}) for _ in range(50)] == [b.pick("GET", "/", {}, {}) for _ in range(50)]
