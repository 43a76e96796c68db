DROP TRIGGER IF EXISTS partitions_delete_records ON partitions;
DROP TRIGGER IF EXISTS records_partition_check ON records;
DROP FUNCTION IF EXISTS partitions_delete_records_v1();
DROP FUNCTION IF EXISTS records_partition_check_v1();

ALTER TABLE records ADD CONSTRAINT fk_records_topic_id_partition_partitions FOREIGN KEY(topic_id, partition) REFERENCES partitions (topic_id, partition) ON DELETE CASCADE;
