"""Foreign result files read into records: nccl-tests/rccl-tests text (every format generation), their JSON and
CSV, and fio's JSON of any version; the collective and type names they spell come from benchcore.vocabulary."""
