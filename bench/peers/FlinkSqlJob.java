// The Flink SQL peer of `make bench` (bench/peers/flink.py compiles it and runs it on the jvm/bench-flink jars):
// Kafka -> Parquet files on s3://, keeping key, value, headers, partition,
// offset and timestamp, bounded at the topic's end offsets. Prints one line per phase on stdout for the timing.

import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableEnvironment;
import org.apache.flink.table.api.TableResult;

import java.util.Map;

public class FlinkSqlJob {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], path = args[2], endpoint = args[3];
        String checkpointInterval = args[4], parallelism = args[5];
        // flink-s3-fs-hadoop maps s3.* to its shaded fs.s3a.*; the credentials come from the environment (S3A default chain)
        Configuration conf = Configuration.fromMap(Map.of(
            "s3.endpoint", endpoint,
            "s3.path.style.access", "true",
            "s3.endpoint.region", "us-east-1",
            "execution.checkpointing.interval", checkpointInterval,
            "parallelism.default", parallelism));
        FileSystem.initialize(conf, null);
        TableEnvironment t = TableEnvironment.create(
            EnvironmentSettings.newInstance().inStreamingMode().withConfiguration(conf).build());
        t.executeSql("CREATE TABLE src ("
            + " `key` BYTES, `value` BYTES,"
            + " `headers` MAP<STRING, BYTES> METADATA,"
            + " `partition` INT METADATA VIRTUAL,"
            + " `offset` BIGINT METADATA VIRTUAL,"
            + " `timestamp` TIMESTAMP_LTZ(3) METADATA"
            + ") WITH ("
            + " 'connector' = 'kafka', 'topic' = '" + topic + "',"
            + " 'properties.bootstrap.servers' = '" + bootstrap + "',"
            + " 'properties.group.id' = 'flink-bench',"
            + " 'scan.startup.mode' = 'earliest-offset', 'scan.bounded.mode' = 'latest-offset',"
            + " 'key.format' = 'raw', 'key.fields' = 'key',"
            + " 'value.format' = 'raw', 'value.fields-include' = 'EXCEPT_KEY')");
        t.executeSql("CREATE TABLE dst ("
            + " `key` BYTES, `value` BYTES, `headers` MAP<STRING, BYTES>,"
            + " `partition` INT, `offset` BIGINT, `timestamp` TIMESTAMP_LTZ(3)"
            + ") WITH ("
            + " 'connector' = 'filesystem', 'path' = '" + path + "', 'format' = 'parquet',"
            + " 'parquet.compression' = 'SNAPPY')");
        System.out.println("@@PHASE planned " + System.currentTimeMillis());
        TableResult result = t.executeSql(
            "INSERT INTO dst SELECT `key`, `value`, `headers`, `partition`, `offset`, `timestamp` FROM src");
        System.out.println("@@PHASE submitted " + System.currentTimeMillis());
        result.await();
        System.out.println("@@PHASE finished " + System.currentTimeMillis());
        System.exit(0);
    }
}
