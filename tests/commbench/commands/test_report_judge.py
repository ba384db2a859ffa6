"""commbench report --topology: the judge's verdict (issue 40) in the report's notes, on real public logs."""
from tests.conftest import ROOT, run_tool

LOGS = ROOT / "tests" / "fixtures" / "gpu_logs"   # their sources: SOURCES.md there


def test_report_says_the_judges_verdict_or_why_nothing_was_judged(tmp_path):
    done = run_tool("commbench", "report", LOGS / "gb200-nvl72-rack-coreweave-all_reduce.log", "--topology",
                    "gb200-nvl72", "--out", tmp_path / "rack")
    assert done.returncode == 0, done.stderr
    assert ("- verdict: every judged measurement is what gb200-nvl72 delivers"
            in (tmp_path / "rack/report.md").read_text())
    done = run_tool("commbench", "report", LOGS / "h100-1node-aws-p5-batch-all_reduce.log", "--topology", "dgx-h100",
                    "--out", tmp_path / "p5")
    assert done.returncode == 0, done.stderr
    assert "nothing judged against dgx-h100: 64 record(s): the log says no rank or node count" in \
        (tmp_path / "p5/report.md").read_text()
    assert "--topology" not in run_tool("iobench", "report", "--help").stdout   # commbench's judgement only
