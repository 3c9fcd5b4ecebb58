"""The executors' side of a run: what a Spark write task does with its slice's Arrow batches. Nothing here imports
Spark or Dagster (s3_archive_tests/unit/test_architecture.py checks it): it runs in the executors' Python workers.

    task.py           the write task: a slice's records into objects (rotation, buckets, dead letters, statistics)
    encoders.py       each format's bytes (parquet, avro, the text formats and their codecs)
    avro_encoding.py  Avro's binary encoding a column at a time
    upload.py         one object PUT once to its final key (If-None-Match: *), or a multipart upload
"""
