"""Object keys: how every object name is made and parsed back. Pure: strings in, strings out.

    template.py  the key template engine (placeholders, padding, the ambiguity check, render and parse)
    values.py    partition values as safe, reversible path segments; the time path format
    layout.py    the `layout:` config: the key template and the partition_by dimensions (OutputLayout)
    buckets.py   a record's bucket (partition_by path + record-level template values), the Python reference of
                 what archive/driver/bucket_column.py computes in Spark; Spark's partition directory names
    objects.py   where a window's objects, manifest and dead letters live (WindowLocation; the default layout is
                 OutputLayout())
    foreign_keys.py  the object names of the Kafka Connect S3 sinks (Aiven file.name.template, Confluent)

Nothing here reads S3 or Kafka.
"""
