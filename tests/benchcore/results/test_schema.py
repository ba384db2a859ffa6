"""benchcore.results.schema: records of both tools built in one place, with exactly the documented fields."""
import pytest

from benchcore.results import schema


def test_measurement_has_every_design_field_first_then_extensions():
    rec = schema.measurement("commbench", size_bytes=8, phase="total", busbw_gbps=1.5)
    assert list(rec)[:len(schema.DESIGN["commbench"])] == list(schema.DESIGN["commbench"])
    assert rec["tool"] == "commbench" and rec["size_bytes"] == 8 and rec["wrong"] is None
    assert list(rec)[-1] == "phase" and schema.problems(rec) == []


def test_an_undocumented_field_is_refused_when_built_and_found_when_read():
    with pytest.raises(ValueError, match="bw_gbs"):
        schema.measurement("iobench", bw_gbs=1.0)
    rec = schema.measurement("iobench", bw_mbps=1.0)
    assert schema.problems({**rec, "bw_gbs": 1}) == ["undocumented bw_gbs"]
    del rec["lat_p99_us"]
    assert schema.problems(rec) == ["missing lat_p99_us"]
    assert schema.problems({"tool": "fio"}) == ["unknown tool 'fio'"]


def test_events_carry_the_event_fields_and_their_own():
    ev = schema.event("iobench", "refused", "read-only mount", run_id="r1", mount="/mnt/x")
    assert {k: ev[k] for k in ("tool", "run_id", "event", "reason", "mount")} == {
        "tool": "iobench", "run_id": "r1", "event": "refused", "reason": "read-only mount", "mount": "/mnt/x"}
    assert schema.problems(ev) == [] and ev["hosts"] and ev["timestamp"]
    with pytest.raises(ValueError, match="size_bytes"):
        schema.event("commbench", "failed", "x", size_bytes=1)


@pytest.mark.parametrize("tool", sorted(schema.DESIGN))
def test_extensions_never_shadow_design_fields(tool):
    assert not set(schema.EXTENSIONS[tool]) & set(schema.DESIGN[tool])
    assert all(meaning for meaning in schema.EXTENSIONS[tool].values())
