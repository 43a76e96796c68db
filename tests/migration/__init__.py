"""Migration tests: round trips, frozen revisions, exact downgrades, and head equal to store/sql."""
