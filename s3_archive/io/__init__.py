"""How the product reaches Kafka, Spark and S3.

    kafka.py           KafkaResource: the Kafka connection (admin, producer, consumer), its Spark options, topic
                       configs and first records
    spark.py           SparkResource: a SparkSession with the Kafka source, Avro and S3A (local, cluster or Connect)
    jvm.py             the driver's JVM flags and AppCDS archive; truststore.py: a JVM truststore for a custom CA
    pyspark_daemon.py  the Python workers' daemon (the write path imported before it forks workers)
    s3_resource.py     S3Resource: endpoint, region, credentials, CA bundle, SSE-KMS, storage class, Glue client
    s3.py              S3 helpers used by every stage: the one paginator, the one ClientError reader, manifests,
                       bucket checks
    iceberg_catalog.py the Iceberg catalog of `format: iceberg` (Glue or Hadoop) and its S3 endpoint
    topic_state.py     the topics `topic_pattern` discovery last saw
    paths.py           where things live on disk: the JVM jar cache, the local stack, the state directory
    deadline.py        a deadline of ours around a client call that can ignore its own timeout
"""
