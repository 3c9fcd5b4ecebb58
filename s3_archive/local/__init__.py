"""The embedded local stack: a real Kafka broker from Maven jars and a moto S3/Glue/Athena server."""
