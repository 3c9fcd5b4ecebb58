"""Disaster recovery: capture beside the archive, plan and run a cluster's recovery; see docs/architecture.md."""
