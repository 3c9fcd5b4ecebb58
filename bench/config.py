"""The benchmark's configuration in one place: defaults of `make bench`, the workload's shape, the targets, and where
results go. Plain constants (no I/O, no s3_archive import): every suite file and tool reads them from here."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"  # the JSON of `make bench` and `make bench-reliability`
PAGE = ROOT / "docs" / "benchmarks.md"  # the page of `make bench`
HEAVY_LOCK = "/tmp/locks/heavy"  # the machine's heavy-run lock (flock); the page says whether the run held it

# --- make bench (bench/run.py): the defaults of its command line ---
BUCKET = "bench"
TOPIC = "bench"
DEFAULT_MB = 200  # workload size: MB of keys + values + headers
DEFAULT_REPEATS = 3  # interleaved rounds
WINDOW_RECORDS = 100_000  # records per window of the archive run (and per object of the naive baseline)
CATCHUP_WINDOW_RECORDS = 200
CATCHUP_WINDOWS = 100
SENSOR_TICK_WINDOWS = 100_000
SENSOR_TICKS = 3
OVERHEAD_REPEATS = 2  # fresh processes per JVM variant
MEMORY_MULTIPLES = (1, 4, 16)  # window sizes of the memory figure; the largest is a whole partition
BYTES_FORMAT_RECORDS = 500  # per partition: format "bytes" writes one object per record
PEERS = ("connect_iceberg", "flink", "spark_streaming")
# Run-overhead variants: the driver's JVM flags, one step at a time (s3_archive/io/jvm.py).
JVM_VARIANTS = {
    "tiered JIT, no AppCDS (before)": {"jvm_profile": "long", "cds": False},
    "C1 only + serial GC": {"jvm_profile": "short", "cds": False},
    "tiered JIT + AppCDS": {"jvm_profile": "long", "cds": True},
    "C1 only + serial GC + AppCDS (default)": {"jvm_profile": "short", "cds": True},
}

# --- the workload (bench/workload.py) ---
PARTITIONS = 4
VALUE_BYTES = 500
# The restore's producer settings (s3_archive/restore/producer.py) minus the transaction: the bare produce, and the
# producer of the workload itself, run with them so that restore vs produce compares like with like.
PRODUCER_CONF = {"enable.idempotence": True, "acks": "all", "linger.ms": 20, "message.max.bytes": 64 << 20,
                 "queue.buffering.max.messages": 200_000}

# --- the deployed shape (bench/deployed.py) ---
DEPLOYED_RATES_MB_S = (10, 25, 50, 75)  # the sustained search, rising; stops at the first rate not kept
DEPLOYED_HOLD_S = 90  # each rate of the search held this long (`--deployed-hold-s 600`: the 10-minute hold)
DEPLOYED_ONE_RECORD_REPEATS = 2
DEPLOYED_DEFAULT_ARM = "local"  # the shipped shape; its figures are the headline keys `deployed_<figure>`
DEPLOYED_TARGETS = {
    "catchup_vs_warm": 4.0,  # first run's launch → lag 0 over the warm archive of the same bytes, at most (< 1 GB)
    "catchup_vs_warm_1gb": 2.0,  # the same from 1 GB up
    "sustained_mb_s": 50.0,  # at least
    "one_record_launcher_s": 4.0,  # a fresh one-record run's process through the daemon's launcher, at most
    "one_record_cli_s": 6.0,  # through `dagster asset materialize`, at most
}

# --- many topics (bench/many_topics.py) ---
MANY_TOPICS = 1000
MANY_TOPICS_PARTITIONS = 4
MANY_TOPICS_TARGET_S = 10.0  # definitions load, a discovery tick, an offsets-sensor tick, the asset catalog: under

# --- years of windows (bench/windows_scale.py) ---
WINDOWS = 1_000_000
WINDOWS_PARTITIONS = 32
WINDOWS_LIVE_DAYS = 7.0
WINDOWS_TOPIC = "bench.windows"
WINDOW_MINUTES = 10

# --- targets: ratios, higher is better; the page judges each figure's median against its target ---
TARGETS = {
    "archive_vs_limit": 0.5,  # the limit: the best of one and N parallel bare consumers (and PUTs)
    "archive_vs_limit_stretch": 0.7,
    "archive_vs_spark_read": 0.9,
    "archive_vs_naive": 1.5,  # the best of the naive script once and in N processes
    "archive_vs_connect_iceberg": 1.5,
    "archive_vs_flink": 1.0,
    "archive_vs_spark_streaming": 1.2,
    "restore_vs_produce": 1.2,  # one bare producer
    "restore_vs_parallel_produce": 0.6,  # the best of N bare producers in parallel processes
}
RUN_OVERHEAD_TARGET_S = 8  # at most
REGISTRY_TARGET = 0.8  # Avro (Schema Registry) decoded to parquet over raw parquet of the same records: at least
HASH_COST_TARGET = 0.05  # the SHA-256 of every object written (tamper evidence): at most 5 % of archive time
REQUESTS_OVER_OBJECTS_PER_WINDOW = 4  # S3 requests per window: at most its objects + this
JVM_PEAK_GROWTH_TARGET = 1.25  # JVM peak of a 16x window over a 1x one: at most
WINDOWS_TARGET_S = 2.0  # sensor tick and partition status query with 1M windows: under

# --- make bench-reliability (bench/reliability.py) ---
RELIABILITY_BUCKET = "reliability"
RELIABILITY_RUNS = 100
RELIABILITY_MINUTES = 10.0
RELIABILITY_SHARE = 0.10
