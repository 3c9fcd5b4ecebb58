"""The catalog domain: one Glue table per archived topic, kept current as windows land (s3_archive/catalog/)."""
