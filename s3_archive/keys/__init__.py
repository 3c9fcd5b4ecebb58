"""Object keys: every object name, made and parsed back; pure (its modules: docs/architecture.md)."""
