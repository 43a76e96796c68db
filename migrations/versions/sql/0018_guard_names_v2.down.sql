CREATE OR REPLACE FUNCTION txn_history_guard_v1()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path FROM CURRENT
AS $function$
BEGIN
    -- A custom setting, local to the pruning transaction: only expire_txn_history_v1 sets it. The
    -- owner could drop this trigger anyway; the guard stops mistakes, not the owner.
    IF TG_OP = 'DELETE' AND current_setting('oncelog.pruning_txn_history', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'OL000',
        MESSAGE = format('%s is append-only: %s is refused (history is pruned by expire_txn_history_v1)',
                         TG_TABLE_NAME, TG_OP);
END
$function$;

COMMENT ON FUNCTION txn_history_guard_v1() IS 'Trigger: txn_history is append-only; UPDATE is refused, DELETE is let through only for expire_txn_history_v1.';

REVOKE ALL ON FUNCTION txn_history_guard_v1() FROM PUBLIC;
