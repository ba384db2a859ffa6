"""fio as the same workload as a model-shaped checkpoint: the same files, sizes and processes, one fio job per file,
each process's files one after another (wait_for), every file fsynced when closed (torch fsyncs each before it
counts as written); reads of those files after the cache is dropped (invalidate=1), or with O_DIRECT where the
client keeps a cache of its own. Each call moves one tensor's bytes, as torch.save and torch.load do (at most
64 MiB, models.MAX_TENSOR_BYTES). Rank 0 of model_worker runs it just before torch's phase of the same kind
and index, so the two are measured moments apart."""
from iobench.models import MAX_TENSOR_BYTES

ALIGN = 4096


def call_bytes(nbytes, direct):
    """fio's bs for a file: one call per tensor (up to 64 MiB); O_DIRECT: a multiple of 4 KiB."""
    bs = min(MAX_TENSOR_BYTES, nbytes)
    return max(ALIGN, bs // ALIGN * ALIGN) if direct else bs


def files(layout, processes, fmt):
    """{process: [(file name, bytes)]} as model_worker writes them: torch-save, each layout rank's files of that
    process; dcp, one file per process holding all of them (its FileSystemWriter with one thread)."""
    out = {}
    for p in range(processes):
        mine = [(s.name, s.nbytes) for s in layout.shards if s.rank % processes == p]
        out[p] = mine if fmt == "torch-save" else [(f"__{p}_0.distcp", sum(n for _, n in mine))]
    return out


def job_text(layout, processes, direction, direct=False, fmt="torch-save"):
    """The job file: the layout's files as process p of `processes` writes (reads) them in model_worker."""
    lines = ["[global]", "thread=1", "ioengine=psync", "iodepth=1", f"rw={direction}"]
    lines += ["fsync_on_close=1", "create_on_open=1", "fallocate=none"] if direction == "write" else \
        ["direct=1" if direct else "invalidate=1"]
    for p, mine in files(layout, processes, fmt).items():
        previous = None
        for filename, nbytes in mine:
            bs = call_bytes(nbytes, direct)
            name = f"p{p}.{filename}"
            lines += ["", f"[{name}]", f"filename={filename}", f"bs={bs}", f"size={max(bs, nbytes // bs * bs)}"]
            if previous:
                lines.append(f"wait_for={previous}")
            previous = name
    return "\n".join(lines) + "\n"


def figures(data, direction):
    """(bytes, seconds) of a fio run of job_text: every file's bytes, and the slowest process's time, the sum of
    its jobs' runtimes (each job: open, the calls, the fsync at close; fio reports milliseconds)."""
    per_process, total = {}, 0
    for job in data["jobs"]:
        proc = job["jobname"].split(".", 1)[0]
        per_process[proc] = per_process.get(proc, 0) + job["job_runtime"] / 1e3
        total += job[direction]["io_bytes"]
    return total, max(per_process.values())
