DROP FUNCTION IF EXISTS read_limits_v1(text[], integer[], bigint[], bigint[]);
