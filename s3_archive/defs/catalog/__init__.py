"""The catalog domain: one Glue table per archived topic (its modules: docs/architecture.md)."""
