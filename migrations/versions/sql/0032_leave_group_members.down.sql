DROP FUNCTION leave_group_members_v1(text, text[], text[]);
