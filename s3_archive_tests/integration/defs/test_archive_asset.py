"""The archive asset's run log: a failed window is reported with its whole traceback, the others still commit, and
the run fails listing every failed window."""

import dagster as dg

from s3_archive.model.windows import OffsetWindow
from s3_archive_tests.integration.archive_helpers import archive_config, manifest, materialize, resources
from s3_archive_tests.kafka_helpers import create_topic, produce


def test_a_failed_window_logs_its_traceback_and_fails_the_run_naming_it(kafka, s3, services, spark_resource,
                                                                          unique):
    topic = create_topic(kafka, f"tb-{unique}")
    produce(kafka, topic, [(0, None, b"x", [])] * 3)
    cfg = archive_config(services.bucket, topic, f"tb/{unique}/")
    ok, beyond = OffsetWindow(0, 0, 3), OffsetWindow(0, 3, 8)
    instance = dg.DagsterInstance.ephemeral()
    result = materialize(cfg, topic, [ok, beyond], resources(services, kafka, spark_resource), instance,
                         raise_on_error=False)

    assert not result.success and manifest(s3, cfg, topic, ok).record_count == 3
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = failure.event_specific_data.error.message
    assert f"1 of 2 windows failed:\n{beyond.key}: WindowNotAvailable: " in message
    logged = [e.user_message for e in instance.all_logs(result.run_id) if e.level >= 40]  # ERROR
    (window_log,) = [m for m in logged if m.startswith(f"window {beyond.key} failed:")]
    assert "Traceback (most recent call last):" in window_log and "WindowNotAvailable" in window_log
    assert "has only reached offset 3 (high watermark)" in window_log
