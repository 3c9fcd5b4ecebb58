"""Erasure on request: records rewritten out of an archive's windows in every format; see docs/architecture.md."""
