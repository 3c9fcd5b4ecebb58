"""The Glue Data Catalog table of each archived topic, so Athena (or Spark, Trino) can query the archive in place.

    mappings.py    per archive format: SerDe, input/output formats, columns (MAPPINGS), and the formats with no table
    tables.py      the table input, the Athena DDL, columns and schema evolution, and the diff against Glue
    table_partitions.py  partition keys of the layout, projection, and the values of partition directories
    glue.py        the I/O: database, table and partitions written only when missing or changed
    avro_header.py the avro table's schema literal, read from an archived object's header
"""
