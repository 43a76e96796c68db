DROP FUNCTION offset_delete_v1(text, text[], integer[]);
