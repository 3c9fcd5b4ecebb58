"""The metrics exporter (`s3-archive metrics serve`); docs/architecture.md is the map."""
