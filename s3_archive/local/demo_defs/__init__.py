"""The demo's archives declared as Dagster components, a defs.yaml per folder (docs/architecture.md)."""
