"""The benchmark's peers: other tools that move the same topic to the same S3, each started from its own jars."""
