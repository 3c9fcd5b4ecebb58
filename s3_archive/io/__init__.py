"""How the product reaches Kafka, Spark and S3, and what rights that takes.

    kafka.py   KafkaResource: the Kafka connection (admin, producer, consumer) and its Spark options
    spark.py   SparkResource: a SparkSession with the Kafka source, Avro and S3A (local, cluster or Connect)
    s3.py      S3 helpers used by every stage: the one paginator, the one ClientError reader, manifests, bucket checks
    paths.py   where things live on disk: the JVM jar cache, the local stack
    iam.py     the least-privilege IAM policy for the configured archives
"""
