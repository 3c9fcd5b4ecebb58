"""The local stack of the demo and the tests, started and stopped by PID (its modules: docs/architecture.md)."""
