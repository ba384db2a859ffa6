"""The result layer of both tools: records and their schema, reading any result file into records, which numbers
are usable, statistics, diff and thresholds, the import/diff/report commands built on them, and the metrics
(Prometheus' text format) both tools' --metrics and --pushgateway publish."""
