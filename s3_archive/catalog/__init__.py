"""The catalog stage: the Glue table of each archived topic (its modules: docs/architecture.md)."""
