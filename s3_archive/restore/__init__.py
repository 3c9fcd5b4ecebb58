"""Restoring archived windows into Kafka, exactly once, in the order it happens:

    request.py         what to restore (RestoreRequest, filters), what a window reports, one window to read
    sources.py         our archives: manifests → windows → records in offset order (spooled, prefetched)
    readers.py         record readers per archive format (parquet, avro, jsonl, json)
    batch.py           records column-wise in batches (what readers hand the run), their selection, read-ahead
    foreign.py         archives of the Kafka Connect S3 sinks: listing → windows → records
    foreign_decode.py  their object contents (csv, json, avro, parquet, bytes; gzip, snappy, zstd)
    cold.py            objects in GLACIER / DEEP_ARCHIVE: RestoreObject, then fail or wait
    routing.py         which target partition a record goes to (same, murmur2, map)
    ledger.py          which source offsets are already restored (pure range sets and their encoding)
    kafka.py           the transactional producer and the ledger's store in Kafka; target topic checks
    run.py             the restore run: windows in order, transactions carrying the ledger
"""
