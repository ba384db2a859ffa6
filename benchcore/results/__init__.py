"""The result layer of both tools: records and their schema, reading any result file into records, which numbers
are usable, statistics, diff and thresholds, and the import/diff/report commands built on them."""
