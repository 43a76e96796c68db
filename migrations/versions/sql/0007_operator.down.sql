DROP FUNCTION IF EXISTS reset_group_offsets_v1(text, text[], integer[], bigint[]);
