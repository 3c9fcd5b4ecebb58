"""The restore domain: one asset per archived topic, partitioned by the archive's offset windows."""
