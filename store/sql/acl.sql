-- Access control (Kafka's ACL model, allow only): administration, and the checks every protocol
-- function makes first, before any lock or write. The principal is the session's role.

CREATE OR REPLACE FUNCTION create_acl_v1(p_principal text, p_resource_type text, p_resource_name text, p_pattern_type text DEFAULT 'literal'::text, p_operation text DEFAULT 'all'::text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    PERFORM acl_validate_v1(p_principal, p_resource_type, p_resource_name, p_pattern_type, p_operation);
    INSERT INTO acls (principal, resource_type, resource_name, pattern_type, operation, created_by)
    VALUES (p_principal, p_resource_type, p_resource_name, p_pattern_type, p_operation, session_user)
    ON CONFLICT ON CONSTRAINT pk_acls DO NOTHING;
    RETURN FOUND;
END
$fn$;
COMMENT ON FUNCTION create_acl_v1(p_principal text, p_resource_type text, p_resource_name text, p_pattern_type text, p_operation text) IS
  'CreateAcls: allows the principal (a role) an operation on the topics, groups or transactional ids named literally or by prefix. Returns false when the same ACL already exists. OL000 on a bad argument.';

CREATE OR REPLACE FUNCTION delete_acls_v1(p_principal text DEFAULT NULL::text, p_resource_type text DEFAULT NULL::text, p_resource_name text DEFAULT NULL::text, p_pattern_type text DEFAULT NULL::text, p_operation text DEFAULT NULL::text)
 RETURNS TABLE(principal text, resource_type text, resource_name text, pattern_type text, operation text)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
    WITH gone AS (
        DELETE FROM acls a
        WHERE (p_principal IS NULL OR a.principal = p_principal)
          AND (p_resource_type IS NULL OR a.resource_type = p_resource_type)
          AND (p_resource_name IS NULL OR a.resource_name = p_resource_name)
          AND (p_pattern_type IS NULL OR a.pattern_type = p_pattern_type)
          AND (p_operation IS NULL OR a.operation = p_operation)
        RETURNING a.principal, a.resource_type, a.resource_name, a.pattern_type, a.operation)
    SELECT g.principal, g.resource_type, g.resource_name, g.pattern_type, g.operation FROM gone g
    ORDER BY g.principal, g.resource_type, g.resource_name, g.pattern_type, g.operation
$fn$;
COMMENT ON FUNCTION delete_acls_v1(p_principal text, p_resource_type text, p_resource_name text, p_pattern_type text, p_operation text) IS
  'DeleteAcls: removes the ACLs matching the filter (NULL matches anything; names match exactly, not as patterns) and returns them.';

CREATE OR REPLACE FUNCTION describe_acls_v1(p_principal text DEFAULT NULL::text, p_resource_type text DEFAULT NULL::text, p_resource_name text DEFAULT NULL::text, p_pattern_type text DEFAULT NULL::text, p_operation text DEFAULT NULL::text)
 RETURNS TABLE(principal text, resource_type text, resource_name text, pattern_type text, operation text, created_at timestamp with time zone, created_by text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
    SELECT a.principal, a.resource_type, a.resource_name, a.pattern_type, a.operation, a.created_at, a.created_by
    FROM acls a
    WHERE (p_principal IS NULL OR a.principal = p_principal)
      AND (p_resource_type IS NULL OR a.resource_type = p_resource_type)
      AND (p_resource_name IS NULL OR a.resource_name = p_resource_name)
      AND (p_pattern_type IS NULL OR a.pattern_type = p_pattern_type)
      AND (p_operation IS NULL OR a.operation = p_operation)
    ORDER BY a.principal, a.resource_type, a.resource_name, a.pattern_type, a.operation
$fn$;
COMMENT ON FUNCTION describe_acls_v1(p_principal text, p_resource_type text, p_resource_name text, p_pattern_type text, p_operation text) IS
  'DescribeAcls: the ACLs matching the filter (NULL matches anything), with who created them and when.';

CREATE OR REPLACE FUNCTION set_acl_enforcement_v1(p_enforce boolean)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_before boolean;
BEGIN
    IF p_enforce IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000', MESSAGE = 'enforce ACLs: true or false';
    END IF;
    SELECT x.enforce INTO v_before FROM acl_settings x FOR UPDATE;
    UPDATE acl_settings x SET enforce = p_enforce, changed_at = now(), changed_by = session_user;
    RETURN v_before;
END
$fn$;
COMMENT ON FUNCTION set_acl_enforcement_v1(p_enforce boolean) IS
  'Switches ACL enforcement on or off for this installation (calls that start after the switch commits see it); returns the previous setting.';

CREATE OR REPLACE FUNCTION acl_allowed_v1(p_resource_type text, p_name text, p_operation text)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_role oid;
BEGIN
    IF NOT (SELECT acl_settings.enforce FROM acl_settings) THEN
        RETURN true;
    END IF;
    v_role := acl_caller_v1();
    RETURN v_role IS NOT NULL
       AND (acl_bypass_v1(v_role) OR acl_match_v1(v_role, p_resource_type, p_name, p_operation));
END
$fn$;
COMMENT ON FUNCTION acl_allowed_v1(p_resource_type text, p_name text, p_operation text) IS
  'Whether the calling session may perform p_operation (read, write, describe) on a resource (topic, group, transactional_id): always while enforcement is off. Filters the views and txn_history; a caller can only ask about itself.';

CREATE OR REPLACE FUNCTION acl_caller_v1()
 RETURNS oid
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    RETURN to_regrole(quote_ident(CASE WHEN current_setting('role') = 'none' THEN session_user::text
                                       ELSE current_setting('role') END));
END
$fn$;
COMMENT ON FUNCTION acl_caller_v1() IS
  'Internal: the ACL principal of the session (the SET ROLE role, else session_user), as a role oid.';

CREATE OR REPLACE FUNCTION acl_bypass_v1(p_role oid)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    RETURN p_role IS NOT NULL
       AND (pg_has_role(p_role, current_user, 'USAGE')
            OR coalesce(pg_has_role(p_role, to_regrole('oncelog_admin'), 'USAGE'), false));
END
$fn$;
COMMENT ON FUNCTION acl_bypass_v1(p_role oid) IS
  'Internal: true when the role has the privileges of the schema owner or of the admin role (ACLs do not apply).';

CREATE OR REPLACE FUNCTION acl_match_v1(p_role oid, p_resource_type text, p_name text, p_operation text)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    -- A principal that no longer exists matches nobody (to_regrole gives NULL).
    RETURN EXISTS (
        SELECT 1 FROM acls a
        WHERE a.resource_type = p_resource_type
          AND (a.operation = p_operation OR a.operation = 'all'
               OR (p_operation = 'describe' AND a.operation IN ('read', 'write')))
          AND CASE a.pattern_type
                  WHEN 'literal' THEN a.resource_name = p_name OR a.resource_name = '*'
                  ELSE starts_with(p_name, a.resource_name)
              END
          AND pg_has_role(p_role, to_regrole(quote_ident(a.principal)), 'USAGE'));
END
$fn$;
COMMENT ON FUNCTION acl_match_v1(p_role oid, p_resource_type text, p_name text, p_operation text) IS
  'Internal: whether an ACL allows the role p_operation on the named resource (DESCRIBE is implied by READ and WRITE, everything by ALL; a literal * matches every name; prefixed patterns match by prefix).';

CREATE OR REPLACE FUNCTION acl_require_v1(p_resource_type text, p_names text[], p_operation text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
DECLARE
    v_role oid;
    v_denied text;
BEGIN
    IF coalesce(cardinality(array_remove(p_names, NULL)), 0) = 0 THEN
        RETURN;  -- no resource named (a produce outside a transaction names no transactional id)
    END IF;
    v_role := acl_caller_v1();
    IF acl_bypass_v1(v_role) THEN
        RETURN;
    END IF;
    SELECT x.n INTO v_denied FROM unnest(p_names) WITH ORDINALITY AS x(n, i)
    WHERE x.n IS NOT NULL AND (v_role IS NULL OR NOT acl_match_v1(v_role, p_resource_type, x.n, p_operation))
    ORDER BY x.i
    LIMIT 1;
    IF v_denied IS NOT NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = CASE p_resource_type WHEN 'topic' THEN 'OL501' WHEN 'group' THEN 'OL502' ELSE 'OL503' END,
            MESSAGE = format('role %s is not authorized to %s %s %L (no ACL allows it)',
                             coalesce(v_role::regrole::text, current_setting('role')),
                             p_operation, replace(p_resource_type, '_', ' '), v_denied);
    END IF;
END
$fn$;
COMMENT ON FUNCTION acl_require_v1(p_resource_type text, p_names text[], p_operation text) IS
  'Internal: raises OL501 (topic), OL502 (group) or OL503 (transactional id) unless the calling session may perform p_operation on every named resource.';

CREATE OR REPLACE FUNCTION acl_validate_v1(p_principal text, p_resource_type text, p_resource_name text, p_pattern_type text, p_operation text)
 RETURNS void
 LANGUAGE plpgsql
 STABLE
 SET search_path FROM CURRENT
AS $fn$
BEGIN
    IF p_principal IS NULL OR NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = p_principal) THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('principal %L is not a role of this server', p_principal);
    END IF;
    IF p_resource_type IS NULL OR p_resource_type NOT IN ('topic', 'group', 'transactional_id') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('resource type %L is not topic, group or transactional_id', p_resource_type);
    END IF;
    IF p_pattern_type IS NULL OR p_pattern_type NOT IN ('literal', 'prefixed') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('pattern type %L is not literal or prefixed', p_pattern_type);
    END IF;
    IF p_operation IS NULL OR p_operation NOT IN ('read', 'write', 'describe', 'all')
       OR (p_resource_type = 'group' AND p_operation = 'write')
       OR (p_resource_type = 'transactional_id' AND p_operation = 'read') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('operation %L does not apply to a %s (topic: read, write, describe, all; group: read, '
                             'describe, all; transactional_id: write, describe, all)', p_operation,
                             replace(coalesce(p_resource_type, 'resource'), '_', ' '));
    END IF;
    IF p_resource_name IS NULL OR length(p_resource_name) NOT BETWEEN 1 AND 255
       OR (p_resource_type = 'topic' AND NOT (
               (p_resource_name ~ '^[A-Za-z0-9._-]{1,249}$'
                AND (p_pattern_type = 'prefixed' OR p_resource_name NOT IN ('.', '..')))
               OR (p_pattern_type = 'literal' AND p_resource_name = '*')))
       OR (p_pattern_type = 'prefixed' AND p_resource_name = '*') THEN
        RAISE EXCEPTION USING ERRCODE = 'OL000',
            MESSAGE = format('%L is not a valid %s %s (a literal * means every name)', p_resource_name,
                             p_pattern_type, replace(p_resource_type, '_', ' '));
    END IF;
END
$fn$;
COMMENT ON FUNCTION acl_validate_v1(p_principal text, p_resource_type text, p_resource_name text, p_pattern_type text, p_operation text) IS
  'Internal: checks an ACL (an existing role as principal; resource type, pattern type and operation that fit; a valid name or prefix); raises OL000.';
