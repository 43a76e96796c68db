ALTER TABLE records DROP CONSTRAINT fk_records_topic_id_partition_partitions;

CREATE FUNCTION records_partition_check_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_missing text;
BEGIN
    SELECT format('(%s, %s)', n.topic_id, n.partition) INTO v_missing
    FROM (SELECT DISTINCT topic_id, partition FROM new_records) n
    WHERE NOT EXISTS (SELECT 1 FROM partitions p WHERE p.topic_id = n.topic_id AND p.partition = n.partition)
    LIMIT 1;
    IF v_missing IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'foreign_key_violation',
            MESSAGE = format('records for partition %s, which does not exist', v_missing);
    END IF;
    RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION records_partition_check_v1() IS
  'Trigger: every inserted record belongs to an existing partition (checked once per statement).';

CREATE TRIGGER records_partition_check
AFTER INSERT ON records
REFERENCING NEW TABLE AS new_records
FOR EACH STATEMENT EXECUTE FUNCTION records_partition_check_v1();

CREATE FUNCTION partitions_delete_records_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $fn$
BEGIN
    DELETE FROM records r USING gone g WHERE r.topic_id = g.topic_id AND r.partition = g.partition;
    RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION partitions_delete_records_v1() IS
  'Trigger: deleting partitions deletes their records (once per statement).';

CREATE TRIGGER partitions_delete_records
AFTER DELETE ON partitions
REFERENCING OLD TABLE AS gone
FOR EACH STATEMENT EXECUTE FUNCTION partitions_delete_records_v1();

REVOKE ALL ON FUNCTION records_partition_check_v1() FROM PUBLIC;

REVOKE ALL ON FUNCTION partitions_delete_records_v1() FROM PUBLIC;
