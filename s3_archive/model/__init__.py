"""The pure vocabulary every stage shares (its modules: docs/architecture.md)."""
