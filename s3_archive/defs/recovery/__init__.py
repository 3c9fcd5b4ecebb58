"""Dagster side of disaster recovery: the capture sensors and the recovery job (docs/architecture.md)."""
