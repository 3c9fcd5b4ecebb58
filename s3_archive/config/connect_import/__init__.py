"""`s3-archive import-connect`: a Kafka Connect S3 sink config (Aiven, Confluent, Lenses KCQL) turned into an
archive YAML block. Pure: text in, text out (cli.py reads and writes the files)."""
