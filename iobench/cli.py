"""The iobench command line."""
import os
from pathlib import Path

import click

from benchcore.errors import UserError, refuse_given, run_cli
from benchcore.processes.busy import Busy, busy_line
from benchcore.processes.route import split_endpoint
from benchcore.processes.torchrun import too_many
from benchcore.progress import quiet_option
from benchcore.report.render import FORMATS, emit
from benchcore.results import commands, metrics
from benchcore.results.records import (PLOT_SUFFIXES, RecordWriter, new_output, new_output_option, new_run_id,
                                       output_file, version_option)
from benchcore.units import format_size, parse_size
from iobench import bench, model_ckpt, models, modes_table, savemodes, torchckpt
from iobench.jobfile import read_job_file, space_estimate
from iobench.mounts import all_mounts
from iobench.output import bar_plot, mount_row, print_mounts, print_results
from iobench.profiles import PROFILES, build_job, parse_profiles, space_needed, unlink_when_done
from iobench.safety import clean as clean_dirs

DEFAULT_TIMEOUT = 1800
DRY_RUN = "not with --dry-run, which prints what would run and runs nothing"


def positive(what):
    def check(ctx, param, value):
        if value is not None and value < 1:
            raise UserError(f"{what} must be at least 1, got {value}")
        return value
    return check


def size_option(ctx, param, value):
    return None if value is None else parse_size(value, f"--{param.name}")


def json_keeper(keep_json, out, run_id):
    """--keep-json needs a real --out file to sit next to."""
    if not keep_json:
        return None
    path = output_file(out) if out else None
    if not path:
        raise UserError("--keep-json keeps fio's JSON next to the records: give --out FILE")
    new_output(f"{path}.{run_id}.1.fio.json", "--keep-json")   # fio's JSON files are new files beside it
    return bench.JsonKeeper(path, run_id)


def check_timeout(timeout, runtime):
    if runtime is not None and timeout <= runtime:
        bench.say(f"warning: --timeout {timeout} s is not longer than --runtime {runtime} s: fio will be stopped "
                  f"before it finishes")


def open_writer(out):
    """RecordWriter appending to --out (checked by benchcore.results.records.output_file), or None."""
    path = output_file(out)
    return RecordWriter(path) if path else None


def output_options(fn):
    for option in reversed([
        click.option("--out", default=None, help="Append records to this JSONL file (never overwritten)."),
        *metrics.options(),
        click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
                     help="What goes to stdout."),
        click.option("--timeout", type=int, default=DEFAULT_TIMEOUT, show_default=True,
                     callback=positive("--timeout"),
                     help="Seconds one fio run may take before it is stopped (torch-ckpt: the checkpoints too; its "
                          "torchrun, which runs fio's reference, gets that for each)."),
        click.option("--keep", is_flag=True, help="Leave the iobench-<run-id> directory (and its fio job files)."),
        click.option("--keep-json", is_flag=True, help="Keep fio's raw JSON next to --out: OUT.<run-id>.<n>.fio.json."),
        click.option("--concurrent", is_flag=True,
                     help="Run even while another iobench measures the same mount (records say concurrent)."),
        click.option("--wait", type=click.IntRange(min=0), default=0, show_default=True,
                     help="Seconds to wait for another iobench measuring the same mount before refusing."),
        quiet_option,
    ]):
        fn = option(fn)
    return fn


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@version_option()
def cli():
    """Checkpoint-storage benchmarks: fio workloads and real PyTorch checkpoints on real mounts.

    iobench writes only inside a fresh iobench-<run-id> directory under each PATH and removes it
    afterwards (also on Ctrl-C, SIGTERM and failures).

    \b
    Example:
      iobench mounts
      iobench ckpt /mnt/nvme /mnt/cephfs --quick
      iobench ckpt /mnt/nvme --profile shard-write,restore-read --size 64G --ranks 8 --out results.jsonl
      iobench torch-ckpt /mnt/nvme --size 2G --ranks 2
    """


PROFILE_HELP = "Comma list, default all: " + "; ".join(f"{p.name}: {p.about}" for p in PROFILES.values())


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--profile", "profiles", default=None, help=PROFILE_HELP)
@click.option("--quick", is_flag=True, help="Short smoke run: small sizes, 5 s for time-based profiles.")
@click.option("--runtime", type=int, default=None, callback=positive("--runtime"),
              help="Seconds for time-based profiles (default 120); a cap for size-based ones.")
@click.option("--size", default=None, callback=size_option,
              help="Working set per node, all jobs together (shard-write: the whole checkpoint). Defaults: "
                   + ", ".join(f"{p.name} {p.size} (--quick {p.quick_size})" for p in PROFILES.values()) + ".")
@click.option("--bs", default=None, callback=size_option, help="Block size override (e.g. 4K, 1M, 8M).")
@click.option("--iodepth", type=int, default=None, callback=positive("--iodepth"), help="Queue depth override.")
@click.option("--jobs", type=int, default=None, callback=positive("--jobs"), help="numjobs override (all profiles).")
@click.option("--ranks", type=int, default=8, show_default=True, callback=positive("--ranks"),
              help="Ranks per node: numjobs and shard files of shard-write/restore-read.")
@click.option("--direct", is_flag=True,
              help="shard-write with O_DIRECT (1 MiB writes, the end fsync kept), as high-end checkpoint writers do.")
@click.option("--plot", default=None, callback=new_output_option("--plot", PLOT_SUFFIXES),
              help="PNG of MB/s and P99 per mount (a new file).")
@click.option("--dry-run", is_flag=True,
              help="Print the fio job file and exit; nothing is written (no free space needed).")
@output_options
def ckpt(paths, profiles, quick, runtime, size, bs, iodepth, jobs, ranks, direct, plot, dry_run, out, fmt, timeout,
         keep, keep_json, concurrent, wait):
    """Checkpoint-shaped fio profiles on each PATH; mounts side by side.

    \b
    Example:
      iobench ckpt /mnt/nvme /mnt/cephfs --quick
      iobench ckpt /mnt/nvme --profile small-random-write --runtime 60 --iodepth 32 --format csv
      iobench ckpt /mnt/nvme --dry-run > ckpt.fio
    """
    selected = parse_profiles(profiles)
    if dry_run:
        refuse_given(["out", "fmt", "keep_json", "plot"], DRY_RUN)
    if not any(p.direct_option for p in selected):
        refuse_given(["direct"], "goes with shard-write (the profile that writes buffered), not with "
                     + ", ".join(p.name for p in selected))
    if jobs is not None:
        refuse_given(["ranks"], "not with --jobs, which sets numjobs of every profile")
    elif not any(p.ranks for p in selected):
        refuse_given(["ranks"], "goes with shard-write and restore-read (a shard file per rank), not with "
                     + ", ".join(p.name for p in selected))
    check_timeout(timeout, runtime)
    job_list = unlink_when_done([build_job(p, quick=quick, size=size, runtime=runtime, bs=bs, iodepth=iodepth,
                                           jobs=jobs, ranks=ranks, direct=direct) for p in selected], keep)
    run_id = new_run_id()
    writer = None if dry_run else open_writer(out)
    keeper = None if dry_run else json_keeper(keep_json, out, run_id)
    targets = bench.check_targets(paths, None if dry_run else space_needed(job_list), run_id, writer)
    if dry_run:
        bench.dry_run(targets, job_list, run_id, "ckpt")
        return
    sharing = bench.Sharing(concurrent, wait)
    with Busy() as busy:
        records = bench.run_jobs(targets, job_list, run_id, timeout, keep, writer, sharing, keeper)
    emit(records, fmt, lambda recs: print_results(recs, title=f"iobench ckpt  (run {run_id})"))
    click.echo(busy_line(busy.fields), err=True)
    metrics.publish(records, "iobench")
    if plot:
        bar_plot(plot, records, title=f"iobench ckpt {run_id}")


@cli.command()
@click.option("--all", "show_all", is_flag=True, help="Also list pseudo file systems (proc, sysfs, cgroup, ...).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="What goes to stdout.")
def mounts(show_all, fmt):
    """This machine's mounts with fs type, storage class and backing device.

    \b
    Example:
      iobench mounts
      iobench mounts --format json
    """
    rows = [mount_row(m) for m in all_mounts(include_pseudo=show_all)]
    emit(rows, fmt, print_mounts)


@cli.command("run")
@click.argument("jobfile", type=click.Path())
@click.option("--directory", "path", required=True, type=click.Path(),
              help="Mount (directory) to run in; fio works inside a fresh iobench-<run-id> below it.")
@click.option("--dry-run", is_flag=True, help="Check the job file and PATH, print the fio command, run nothing.")
@output_options
def run_cmd(jobfile, path, dry_run, out, fmt, timeout, keep, keep_json, concurrent, wait):
    """Any fio job file, through iobench's checks, parser and records.

    Only options that shape I/O on files in iobench's private directory are allowed (an allow-list):
    file-system I/O engines (psync, sync, libaio, io_uring, posixaio, mmap, ...), plain file names.
    Anything that names a program, library, device setting, trace file, log or path, includes
    another file or uses ${VAR} is refused with one line before fio starts.

    \b
    Example:
      iobench run mixed.fio --directory /mnt/nvme --out results.jsonl
    """
    if dry_run:
        refuse_given(["out", "fmt", "keep_json", "keep"], DRY_RUN)
    jobpath = os.path.abspath(jobfile)
    text, sections = read_job_file(jobpath)
    run_id = new_run_id()
    writer = None if dry_run else open_writer(out)
    keeper = None if dry_run else json_keeper(keep_json, out, run_id)
    target, = bench.check_targets([path], None if dry_run else space_estimate(sections), run_id, writer)
    if dry_run:
        directory = os.path.join(target.path, f"iobench-{run_id}")
        click.echo(bench.rerun_line(directory, jobpath, *bench.RUN_ARGS))
        return
    sharing = bench.Sharing(concurrent, wait)
    with Busy() as busy:
        records = bench.run_file(target, jobpath, text, run_id, timeout, keep, writer, sharing, keeper)
    emit(records, fmt, lambda recs: print_results(recs, title=f"iobench run {Path(jobfile).name}  (run {run_id})"))
    click.echo(busy_line(busy.fields), err=True)
    metrics.publish(records, "iobench")


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
def clean(paths):
    """Remove directories iobench made and a killed run left behind.

    PATH is such a directory, or a directory holding them. Only directories with iobench's
    marker file are removed (never by name alone); a run that is still alive keeps its own.

    \b
    Example:
      iobench clean /mnt/nvme
      iobench clean /mnt/nvme/iobench-20261202T130405-1a2b3c
    """
    removed, empty = clean_dirs(paths)
    for directory, size in removed:
        click.echo(f"removed {directory} ({format_size(size, approx=True)})")
    for path in empty:
        click.echo(f"{path}: nothing to clean (no directory here has iobench's marker)")


@cli.command("torch-ckpt")
@click.argument("path", type=click.Path())
@click.option("--size", default="2G", show_default=True, callback=size_option,
              help="Checkpoint size per node, split evenly over the ranks.")
@click.option("--ranks", type=int, default=2, show_default=True, callback=positive("--ranks"),
              help="Ranks torchrun starts on this node (each writes its shard).")
@click.option("--ckpt-format", "ckpt_formats", default="torch-save,dcp", show_default=True,
              help="torch-save (torch.save, one file per rank), dcp (torch.distributed.checkpoint), or both.")
@click.option("--repeats", type=int, default=torchckpt.DEFAULT_REPEATS, show_default=True,
              callback=positive("--repeats"),
              help="Times fio's reference and each format run; MB/s is the median, the ratio has a range.")
@click.option("--fio/--no-fio", "fio_ceiling", default=True, show_default=True,
              help="Run fio's reference at the start of each repeat, and once untimed before them (shard-write, "
                   "restore-read-buffered: same bytes, buffered, durable write, read after a cache drop), for the "
                   "ratio.")
@click.option("--save-mode", "save_modes", default=None,
              help="Also save dcp in these modes, each a format of its own (dcp-MODE): sync, async-thread, "
                   "async-process (DCP's async_save with a thread or a process); its record adds blocked_s. What "
                   "training feels of each: model-ckpt --save-mode.")
@click.option("--plan-cache/--no-plan-cache", default=True, show_default=True,
              help="--save-mode: DCP's save-plan caching.")
@output_options
def torch_ckpt(path, size, ranks, ckpt_formats, repeats, fio_ceiling, save_modes, plan_cache, out, fmt, timeout, keep,
               keep_json, concurrent, wait):
    """Write a real PyTorch checkpoint, fsync, read it back, verify every tensor; compare with fio.

    \b
    Example:
      iobench torch-ckpt /mnt/nvme --size 2G --ranks 2
      iobench torch-ckpt /mnt/cephfs --size 8G --ranks 8 --ckpt-format dcp --out results.jsonl --format json
    """
    formats = torchckpt.parse_formats(ckpt_formats)
    if save_modes:
        formats += [f"dcp-{m}" for m in savemodes.parse_modes(save_modes) if f"dcp-{m}" not in formats]
    if not fio_ceiling:
        refuse_given(["keep_json"], "keeps fio's JSON: not with --no-fio, which runs no fio")
    if size < ranks << 20:
        raise UserError(f"--size must give every rank at least 1 MiB ({ranks} ranks)")
    crowd = too_many(ranks + 1)   # torchrun's agent and a worker per rank
    if crowd:
        raise UserError(f"--ranks {ranks} on this machine is {crowd}: fewer --ranks")
    run_id = new_run_id()
    writer = open_writer(out)
    keeper = json_keeper(keep_json, out, run_id)
    records = torchckpt.run(path, size, ranks, formats, fio_ceiling, timeout, keep, writer, run_id,
                            bench.Sharing(concurrent, wait), keeper, repeats, plan_cache)
    emit(records, fmt, torchckpt.print_torch)
    metrics.publish(records, "iobench")
    wrong = sum(r.get("wrong") or 0 for r in records)
    if wrong:
        raise click.ClickException(f"verification failed: {wrong} tensor(s) read back differ from what was written")


@cli.command("model-ckpt")
@click.argument("path", type=click.Path())
@click.option("--model", "model_name", required=True, type=click.Choice(list(models.MODELS)),
              help="The model whose checkpoint is written (MLPerf Storage v2's checkpointing models).")
@click.option("--tp", type=int, default=None, callback=positive("--tp"), help="Tensor parallel degree (MLPerf's).")
@click.option("--pp", type=int, default=None, callback=positive("--pp"), help="Pipeline parallel degree (MLPerf's).")
@click.option("--dp", type=int, default=None, callback=positive("--dp"), help="Data parallel degree (MLPerf's).")
@click.option("--zero", type=int, default=None, help="ZeRO stage 0-3 (MLPerf's): who holds weights and optimizer.")
@click.option("--scale", type=float, default=1.0, show_default=True,
              help="Shrink every file by this factor so it fits the machine (0.001: llama3-70b in 978 MB).")
@click.option("--ranks", type=int, default=None, callback=positive("--ranks"),
              help="torch ranks that write the layout's files (default: the layout's ranks, at most this "
                   "machine's cores); each writes the files of every --ranks-th layout rank.")
@click.option("--writes", type=int, default=model_ckpt.DEFAULT_WRITES, show_default=True,
              callback=positive("--writes"), help="Checkpoints written, one after another.")
@click.option("--reads", type=click.IntRange(min=0), default=model_ckpt.DEFAULT_READS, show_default=True,
              help="Reads of them afterwards (the cache dropped before each).")
@click.option("--drop/--no-drop", default=True, show_default=True,
              help="Drop the checkpoint from the page cache before each read; --no-drop reads what a restart on the "
                   "same node finds (the figure is then reported as cache, not storage).")
@click.option("--nodes", type=int, default=1, show_default=True, callback=positive("--nodes"),
              help="Nodes writing one checkpoint to shared storage: start the same command on each with its "
                   "--node-rank; node 0 serves the rendezvous at --rdzv-endpoint and makes the records.")
@click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True, help="This node's rank.")
@click.option("--rdzv-endpoint", default=None, help="HOST:PORT of node 0 (an address of node 0 the others reach).")
@click.option("--ckpt-format", "fmt_ckpt", type=click.Choice(list(model_ckpt.PROFILES)), default="torch-save",
              show_default=True, help="torch.save (a file per layout rank's model and optimizer states) or "
                                      "torch.distributed.checkpoint (a file per rank).")
@click.option("--fio/--no-fio", "fio_same", default=True, show_default=True,
              help="Run fio's same workload (the same files, sizes and processes, fsync per file) just before each "
                   "checkpoint, for the ratio (one node only).")
@click.option("--save-mode", "save_modes", default=None,
              help="dcp's save modes to measure as training feels them, each --writes times: sync, async-thread, "
                   "async-process, or several (sync,async-thread,async-process); needs --ckpt-format dcp.")
@click.option("--plan-cache/--no-plan-cache", default=True, show_default=True,
              help="--save-mode: DCP's save-plan caching (DefaultSavePlanner enable_plan_caching).")
@click.option("--step", type=int, default=None, callback=positive("--step"),
              help="--save-mode: n of the training-like step, an n x n by n x n GEMM  [default: 512]")
@click.option("--mtbf", type=float, default=None,
              help="--save-mode: the job's mean time between failures in hours, for the checkpoint interval "
                   "[default: the layout's GPUs at Llama 3's one failure per 50,676 GPU-hours]")
@click.option("--restart-ranks", type=int, default=None, callback=positive("--restart-ranks"),
              help="--save-mode: after the writes, restart from the latest checkpoint on this many ranks, each holding "
                   "its rows of every tensor (DCP reshards the whole tensors saved), cache dropped, timed to the first "
                   "step, every tensor compared.")
@click.option("--plot", default=None, callback=new_output_option("--plot", PLOT_SUFFIXES),
              help="--save-mode: a new image file of step time across a save, per mode (.png, .svg, .pdf).")
@click.option("--dry-run", is_flag=True, help="Print the layout (files and sizes) and run nothing.")
@output_options
def model_ckpt_cmd(path, model_name, tp, pp, dp, zero, scale, ranks, writes, reads, drop, nodes, node_rank,
                   rdzv_endpoint, fmt_ckpt, fio_same, save_modes, plan_cache, step, mtbf, restart_ranks, plot, dry_run,
                   out, fmt, timeout, keep, keep_json, concurrent, wait):
    """Write and read a model-shaped checkpoint as a training job does (MLPerf Storage v2's checkpointing).

    \b
    Example:
      iobench model-ckpt /mnt/nvme --model llama3-8b --scale 0.001
      iobench model-ckpt /mnt/cephfs --model llama3-70b --scale 0.0005 --writes 3 --reads 3 --out results.jsonl
      (node 0)  iobench model-ckpt /mnt/cephfs --model llama3-8b --nodes 2 --rdzv-endpoint node0:29600
      (node 1)  iobench model-ckpt /mnt/cephfs --model llama3-8b --nodes 2 --node-rank 1 --rdzv-endpoint node0:29600
    """
    refuse_given(["keep_json"], "keeps fio's JSON: model-ckpt keeps only its figures")
    if nodes > 1 and not rdzv_endpoint:
        raise UserError(f"--nodes {nodes} needs --rdzv-endpoint HOST:PORT (node 0's address): each node runs this "
                        f"command with its --node-rank")
    if node_rank >= nodes:
        raise UserError(f"--node-rank {node_rank} is not below --nodes {nodes}")
    if rdzv_endpoint:
        split_endpoint(rdzv_endpoint)   # HOST:PORT, else one line before anything runs
    layout = models.layout(model_name, tp, pp, dp, zero, scale)
    modes = model_ckpt.save_modes(save_modes, fmt_ckpt, nodes, plan_cache, step, mtbf, layout, restart_ranks)
    if plot and not modes:
        raise UserError("--plot draws step time across a save: give --save-mode")
    ranks = ranks or max(1, min(layout.ranks // nodes, os.cpu_count() or 1))
    if ranks * nodes > layout.ranks:
        raise UserError(f"--ranks {ranks} on {nodes} node(s) is more than the layout's {layout.ranks} ranks")
    crowd = too_many(ranks + 1)
    if crowd:
        raise UserError(f"--ranks {ranks} on this machine is {crowd}: fewer --ranks")
    if restart_ranks and restart_ranks > ranks:
        raise UserError(f"--restart-ranks {restart_ranks} is more than the --ranks {ranks} that saved it")
    if nodes > 1 and fio_same:
        bench.say("model-ckpt: fio's same workload runs on one node only; over several nodes none runs")
    published = models.MODELS[model_name].published_bytes
    intro = (f"{layout.describe()} (at full scale {layout.full_bytes / models.GIB:,.0f} GiB; MLPerf "
             f"Storage's README: {published / models.GIB:,.0f} GiB); {writes} writes then {reads} reads by {ranks} "
             f"torch ranks")
    if dry_run:
        bench.say(intro)
        for shard in layout.shards[:16]:
            click.echo(f"{shard.name}  {shard.nbytes:,} bytes")
        if len(layout.shards) > 16:
            click.echo(f"... {len(layout.shards) - 16} more files")
        return
    run_id = new_run_id()
    records = model_ckpt.run(path, layout, ranks, writes, reads, timeout, keep, open_writer(out), run_id,
                             bench.Sharing(concurrent, wait), drop,
                             (nodes, node_rank, rdzv_endpoint) if nodes > 1 else None, fio_same and nodes == 1,
                             fmt_ckpt, intro, modes)
    if records:
        emit(records, fmt, model_ckpt.print_model)
    if plot and records:
        modes_table.step_plot(plot, records)
    metrics.publish(records, "iobench")
    wrong = sum(r.get("wrong") or 0 for r in records)
    if wrong:
        raise click.ClickException(f"verification failed: {wrong} tensor(s) read back differ from what was written")


commands.add_to(cli, "iobench")  # import, diff, report (benchcore)


def main():
    run_cli(cli)


if __name__ == "__main__":
    main()
