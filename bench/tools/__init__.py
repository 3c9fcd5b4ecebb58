"""Investigation tools beside the suite (`make bench` runs none of them): per-process CPU accounting, the JFR split of
a Spark JVM's CPU, and the timeline of a fresh run. Each module's docstring says what it answers and how to run it."""
