"""Restoring archived windows into Kafka, exactly once, in the order it happens:

    request.py          what to restore (RestoreRequest, filters), the archived record, what a window reports
    sources.py          our archives: manifests → windows → records in offset order (spooled, prefetched)
    readers.py          record readers per archive format (parquet, avro, jsonl, json)
    batch.py            records column-wise in batches (what readers hand the run), their selection, read-ahead;
                        one window to read (WindowSource, from our archives or a sink's)
    foreign_sources.py  archives of the Kafka Connect S3 sinks: listing → windows → records
    foreign_records.py  their object contents (csv, json, avro, parquet, bytes; gzip, snappy, zstd)
    foreign_run.py      a sink's run: its objects, then the archive that took over from it, summed up
    cold.py             objects in GLACIER / DEEP_ARCHIVE: RestoreObject, then fail or wait
    routing.py          which target partition a record goes to (same, murmur2, map)
    ledger.py           which source offsets are already restored (pure range sets and their encoding)
    target_topic.py     the target topic exists and will not change what is restored
    producer.py         the transactional producer and the ledger's store in Kafka
    run.py              the restore run: windows in order, transactions carrying the ledger
    summary.py          a run summed up (the dry run's plan)
"""
