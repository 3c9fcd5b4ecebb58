"""The archive YAML: pydantic models and loading (its modules: docs/architecture.md)."""
