REVOKE ALL ON ALL TABLES IN SCHEMA @schema@ FROM @schema@_reader, @schema@_client, @schema@_admin;

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA @schema@ FROM @schema@_reader, @schema@_client, @schema@_admin;

REVOKE ALL ON SCHEMA @schema@ FROM @schema@_reader, @schema@_client, @schema@_admin;

DO $$ BEGIN DROP ROLE IF EXISTS @schema@_reader; EXCEPTION WHEN dependent_objects_still_exist THEN NULL; END $$;

DO $$ BEGIN DROP ROLE IF EXISTS @schema@_client; EXCEPTION WHEN dependent_objects_still_exist THEN NULL; END $$;

DO $$ BEGIN DROP ROLE IF EXISTS @schema@_admin; EXCEPTION WHEN dependent_objects_still_exist THEN NULL; END $$;
