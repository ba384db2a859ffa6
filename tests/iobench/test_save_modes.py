"""model-ckpt --save-mode (issue 50): what training feels of a save, from hand-made timings; the interval a cost
affords (Young); the acceptance kind's groups; bad input in one line. The real saves on real storage run in
tests/storage/test_save_modes.py."""
import math

import pytest

from commbench.commands.accept.kinds import KINDS
from iobench import anchors, interval
from iobench.model_ckpt import felt, save_modes
from iobench.models import layout
from iobench.savemodes import figures, parse_modes
from tests.conftest import assert_one_line_error


class Stager:
    seconds = 0.25


def test_figures_of_a_background_save_from_hand_made_step_times():
    """Undisturbed steps of 0.1 s; the save call returns after 0.3 s (blocked), the background save ends at 2.0 s;
    four steps ran beside it, ending at 0.55, 0.85, 1.25 and 2.05 s (0.25, 0.3, 0.4 and 0.8 s each): the window
    from resumption (0.3) to the last overlapping step's end (2.05) is 1.75 s, where undisturbed training does 17.5
    steps; it did 4, so it lost 1.75 - 0.4 = 1.35 s, ran at 0.4 / 1.75 of its rate, and the checkpoint cost
    0.3 + 1.35 s."""
    during = [(0.55, 0.25), (0.85, 0.3), (1.25, 0.4), (2.05, 0.8)]
    got = figures(0.0, 0.3, 2.0, [0.1] * 10, during, Stager())
    assert got["blocked_s"] == pytest.approx(0.3) and got["background_s"] == 2.0 and got["staging_s"] == 0.25
    assert got["steps_during"] == 4 and got["step_s"] == 0.1
    assert got["step_lost_s"] == pytest.approx(1.35) and got["cost_s"] == pytest.approx(1.65)
    assert got["step_rate_during"] == pytest.approx(0.4 / 1.75)
    assert got["step_s_during"] == pytest.approx(1.75 / 4)
    sync = figures(0.0, 4.0, 4.0, [0.1] * 10, [], None)    # sync: training waits for the whole save
    assert sync["blocked_s"] == sync["cost_s"] == sync["background_s"] == 4.0
    assert sync["steps_during"] == 0 and sync["step_rate_during"] is None and sync["staging_s"] is None


def test_young_interval_and_the_share_of_training_lost():
    """cost 10 s, MTBF 20,000 s: tau = sqrt(2 x 10 x 20,000) = 632.5 s; lost = 10 / 632.5 + 316.2 / 20,000 =
    0.0316 (= sqrt(2 C / M)); a background save of 1,000 s stretches the interval to it."""
    got = interval.plan(10, 20_000)
    assert got["interval_s"] == pytest.approx(math.sqrt(400_000))
    assert got["training_lost"] == pytest.approx(math.sqrt(2 * 10 / 20_000))
    slow = interval.plan(10, 20_000, background_s=1000, exposed_s=50, restart_s=100)
    assert slow["interval_s"] == 1000
    assert slow["training_lost"] == pytest.approx(10 / 1000 + (500 + 50 + 100) / 20_000)
    assert interval.plan(0, 20_000) is None
    # Llama 3: 419 unexpected interruptions in 54 days on 16,384 GPUs; a 64-GPU job fails every 791.8 hours
    assert interval.job_mtbf_h(64) == pytest.approx(54 * 24 * 16384 / 419 / 64) == pytest.approx(791.8, abs=0.1)


def test_felt_takes_the_worst_rank_per_checkpoint_then_the_median():
    rank = dict(staging_s=0.1, background_s=2.0, step_s=0.1, step_s_during=0.2, step_rate_during=0.5, steps_during=5)
    phases = [{"felt": [dict(rank, blocked_s=b0, step_lost_s=0.5, cost_s=b0 + 0.5),
                        dict(rank, blocked_s=b1, step_lost_s=1.0, cost_s=b1 + 1.0, steps_during=3)],
               "durable_s": d} for b0, b1, d in ((0.1, 0.3, 2.5), (0.2, 0.2, 3.0), (0.4, 0.1, 9.0))]
    modes = save_modes("async-thread", "dcp", 1, True, None, 100.0, layout("llama3-8b"))
    got = felt(phases, modes, restart_s=60)
    assert got["blocked_s"] == 0.3 and got["steps_during"] == 3 and got["durable_s"] == 3.0
    assert got["cost_s"] == pytest.approx(1.2) and got["cost_s_max"] == pytest.approx(1.3)
    afford = interval.plan(1.2, 360_000, 2.0, 2.7, 60)
    assert got["interval_s"] == pytest.approx(afford["interval_s"])
    assert got["training_lost"] == pytest.approx(afford["training_lost"]) and got["mtbf_h"] == 100


def test_default_mtbf_scales_with_the_layouts_gpus_and_says_its_source():
    modes = save_modes("sync,async-process", "dcp", 1, False, 256, None, layout("llama3-70b"))
    assert modes.names == ("sync", "async-process") and modes.step == 256 and not modes.plan_cache
    assert modes.mtbf_h == pytest.approx(interval.job_mtbf_h(64)) and "arXiv 2407.21783" in modes.mtbf_source
    assert parse_modes("sync, sync,async-thread") == ["sync", "async-thread"]


def test_anchors_carry_their_sources_and_ratios():
    rows = anchors.rows()
    assert all(r["source"] for r in rows)
    ibm = next(r for r in rows if r["sync_s"] == 148.8)
    assert ibm["ratio"] == pytest.approx(148.8 / 6.3)


def test_the_checkpoint_kind_judges_each_save_mode_and_the_restart():
    check = {"model": "llama3-8b", "ckpt_format": "dcp", "save_mode": ["sync", "async-process"], "restart_ranks": 1}
    assert KINDS["checkpoint"].groups(check) == {"llama3-8b-dcp", "llama3-8b-dcp-sync", "llama3-8b-dcp-async-process",
                                                 "llama3-8b-dcp-restart"}
    assert KINDS["checkpoint"].groups({"model": "llama3-8b"}) == {"llama3-8b-ckpt"}


def test_bad_save_mode_input_is_one_line(tool, tmp_path):
    common = ("iobench", "model-ckpt", tmp_path, "--model", "llama3-8b", "--scale", "0.0001")
    assert_one_line_error(tool(*common, "--save-mode", "async"), "unknown --save-mode 'async'")
    assert_one_line_error(tool(*common, "--save-mode", "sync"), "give --ckpt-format dcp")
    assert_one_line_error(tool(*common, "--mtbf", "10"), "are --save-mode's: give --save-mode")
    assert_one_line_error(tool(*common, "--ckpt-format", "dcp", "--save-mode", "sync", "--mtbf", "-1"),
                          "--mtbf must be hours above 0")
    assert_one_line_error(tool(*common, "--ckpt-format", "dcp", "--save-mode", "sync", "--ranks", "2",
                               "--restart-ranks", "3"), "--restart-ranks 3 is more than the --ranks 2")
    assert_one_line_error(tool(*common, "--plot", tmp_path / "p.png"), "--plot draws step time across a save")


def test_checkpoint_thresholds_judge_a_modes_blocked_time_and_training_lost():
    """A spec's `llama3-8b-dcp-async-process blocked_s <= 5` and `... training_lost <= 0.02` judge that mode's write
    record only (the sync one and the reads lack them)."""
    from benchcore.results import thresholds
    base = dict(tool="iobench", mount="/m", rw="write", size_bytes=1 << 20)
    recs = [dict(base, profile="llama3-8b-dcp-sync", save_mode="sync", blocked_s=30.0, training_lost=0.05),
            dict(base, profile="llama3-8b-dcp-async-process", save_mode="async-process", blocked_s=0.8,
                 training_lost=0.03),
            dict(base, profile="llama3-8b-dcp", rw="read")]
    for text, passed in (("llama3-8b-dcp-async-process blocked_s <= 5", True),
                         ("llama3-8b-dcp-async-process training_lost <= 0.02", False),
                         ("llama3-8b-dcp-sync blocked_s <= 5", False)):
        threshold = thresholds.parse(text, "iobench")
        judged = thresholds.judge(threshold, [r for r in recs if threshold.applies(r)])
        assert judged.passed is passed and judged.judged == 1, (text, judged.message)
