"""Strings from records, file names, host names and specs reach report.md only as text, and results.csv only as
data (issue 38 item 6): a check named `<script>` or `<svg onload=...>` was raw HTML in report.md, a cell
starting with `=` a formula in a spreadsheet."""
import csv
import io
import re

from benchcore.report import page
from benchcore.report.render import csv_frame
from benchcore.results import schema

HOSTILE = ["<script>alert(1)</script>", "<svg onload=alert(2)>", "[click](javascript:alert(3))",
           "a | b", "`code`", "*bold* ~~x~~", "# heading", "line\nbreak"]


def rendered_html(md):
    """report.md as a Markdown renderer would see it: no raw tag opens, no link forms, no cell splits."""
    assert "<script" not in md and "<svg" not in md and not re.search(r"(?<!\\)\]\(javascript:", md)
    return md


def test_every_text_in_report_md_is_shown_literally():
    rows = [{"check": page.Link(h, "c1"), "status": "FAIL"} for h in HOSTILE]
    doc = page.Doc(HOSTILE[0], verdict=HOSTILE[1], facts=[("spec", HOSTILE[2])],
                   summary=(HOSTILE[3], [("check", "check", None), ("status", HOSTILE[4], None)], rows),
                   notes=HOSTILE, sections=[page.Section(HOSTILE[5], "c1", [HOSTILE[6], HOSTILE[7]])])
    md = rendered_html(page.markdown(doc))
    table = [ln for ln in md.splitlines() if ln.startswith("| [")]
    assert len(table) == len(HOSTILE) and all(ln.count(" | ") == 1 for ln in table)   # two cells, never more
    assert "&lt;script>alert(1)&lt;/script>" in md and "\\[click\\](javascript:alert(3))" in md
    assert "\n\\# heading" in md and "line break" in md and "\\*bold\\*" in md
    assert "all_reduce" in page.md("all_reduce") and page.md("_x_") == "\\_x\\_"


def test_csv_cells_that_a_spreadsheet_would_run_are_text():
    recs = [schema.measurement("iobench", run_id="r", mount=m, profile="p", bw_mbps=1.0)
            for m in ("=HYPERLINK(\"http://x\")", "+1", "-2+3", "@SUM(A1)", "\tx", "\rx", "/mnt/ok")]
    text = io.StringIO()
    csv_frame(recs).to_csv(text, index=False)
    mounts = [row["mount"] for row in csv.DictReader(io.StringIO(text.getvalue(), newline=""))]
    assert all(m.startswith("'") for m in mounts[:6]) and mounts[6] == "/mnt/ok", mounts
    assert csv_frame(recs, inert=False)["mount"][0].startswith("=")    # Parquet keeps the value as it is
    assert csv_frame(recs)["bw_mbps"][0] == 1.0                        # numbers stay numbers
