"""`commbench accept --init`: a starting spec for a topology and node count, its numbers from the topology's published
references where it has them and from the model elsewhere."""
import json
import shlex

from benchcore.errors import UserError
from benchcore.inputs import shown
from benchcore.units import format_size
from commbench.commands.model import predictions
from commbench.commands.options import CaseOptionsText
from commbench.model import nccl
from commbench.model.judge import SWITCH
from commbench.model.references import matching
from commbench.model.topology import resolve

# The thresholds' margins under the model, and why (each is written beside its threshold).
FULL = 0.9            # the bandwidth check starts where the model's busbw reaches this share of its 16G busbw
MARGIN_PUBLISHED = 0.9  # busbw >= this x the lowest published value of the expected algorithm (the judge's share)
BW_MARGIN = 0.85      # busbw >= this x the model's busbw there
LATENCY_MARGIN = 2    # time_us <= this x the model's time at the latency check's sizes
LATENCY_MAX = 64 << 10
SIZES = [1 << k for k in range(20, 35)]   # 1M .. 16G, where the bandwidth check may start


def _start(rows):
    """The first row whose model busbw reaches FULL of the model's busbw at the largest size (its plateau: an
    NVLS run's ceiling is not its level, so the link peak is not where the model flattens)."""
    return next(r for r in rows if r["busbw_gbps"] >= FULL * rows[-1]["busbw_gbps"])


def _published(topo, nodes, local, expected):
    """(threshold lines with their sources in comments, the size they hold at) from the topology's references for
    all_reduce on these nodes: a provider's pass mark as it is, else MARGIN_PUBLISHED x the lowest published value of
    the algorithm family the model expects (NVLS-level where NVLS is expected); None where none is published."""
    refs = matching(topo, "all_reduce", nodes * local, nodes)
    marks = [r for r in refs if r.kind == "threshold"]
    family = SWITCH if expected in SWITCH else tuple(a for a in nccl.ALGORITHMS if a not in SWITCH)
    mine = [r for r in refs if r.kind == "measured" and r.algorithm in family]
    if marks:
        ref, value = marks[0], marks[0].low
        why = f"a provider's pass mark for this system: {ref.note or ref.label()}"
    elif mine:
        ref = max(mine, key=lambda r: r.size_bytes)
        value = round(MARGIN_PUBLISHED * min(r.low for r in mine if r.size_bytes == ref.size_bytes))
        why = f"{MARGIN_PUBLISHED} x the lowest published {ref.label()} ({100 - MARGIN_PUBLISHED * 100:.0f} % under)"
    else:
        return None
    return (f"""      # Published: {why}
      # (source: {shown(ref.source, 200)}, {ref.date}).
      - busbw >= {value:g} at {format_size(ref.size_bytes)}""", ref.size_bytes)


def init_text(topology, nodes):
    """A starting spec for a topology and node count, each number's reason in a comment. What came from the user
    is quoted: the topology as a YAML (JSON) string, in comments without control characters."""
    topo = resolve(topology)
    said, name = shown(shlex.quote(topology), 300), shown(topo.name, 100)
    local = topo.gpus_per_node or 2
    backend = "nccl" if topo.gpus_per_node else "gloo"
    rows = predictions(topo, ["all_reduce"], [8] + SIZES, nodes, local, backend, CaseOptionsText().parse())
    small, big = rows[0], rows[-1]
    if big.get("link_peak_reason"):
        raise UserError(f"--topology {said}: no link peak or model time to start from: {big['link_peak_reason']}")
    start = _start(rows[1:])
    reached = f"is the first size where the model reaches {FULL} of its busbw at 16G"
    expected = (big["nccl_algo"] or "Ring").split("/")[0]
    published = _published(topo, nodes, local, expected) if topo.gpus_per_node else None
    top = published[1] if published else 0
    published_line = published[0] if published else ("      # Published: none for this system and node count (the "
                                                      "topology's references): the model's alone.")
    picks = lambda r: f", NCCL {r['nccl_algo']}" if r["nccl_algo"] else ""   # noqa: E731
    return f"""# Acceptance spec for {nodes} node(s) of {name}
#   (commbench accept --init --topology {said} --nodes {nodes}).
# Run: commbench accept --spec THIS.yaml --out accept-$(date +%F)/ [--baseline last-good/results.jsonl]
# Numbers come from the topology {name}: its published references where it has them (each with its source),
# and the model (commbench model --topology {said} --nodes {nodes} --collective all_reduce -b 8 -e 16G -f 2);
# each threshold is a stated margin under them.
# Edit the mounts before running.
topology: {json.dumps(topology)}
checks:
  - name: all_reduce-bandwidth
    kind: commbench
    collective: all_reduce
    nodes: {nodes}
    min_bytes: {format_size(start['size_bytes'])}
    max_bytes: {format_size(max(start['size_bytes'], 1 << 30, top))}
    step_factor: 2
    iters: 20
    warmup: 5
    thresholds:
      # all_reduce on {nodes} x {local} ranks is bound by the {start['link_tier']} tier: its ceiling (the highest
      # of the algorithms NCCL may run) is {start['link_peak_gbps']:.1f} GB/s busbw.
      # {format_size(start['size_bytes'])} {reached}: busbw {start['busbw_gbps']:.1f} GB/s
      # ({start['link_utilization']:.2f} of the ceiling{picks(start)}). Margin: {BW_MARGIN} x the model's busbw at \
each size ({100 - BW_MARGIN * 100:.0f} % under
      # it), for what the model leaves out (kernel and proxy overheads, NCCL's channel count, congestion); a link
      # or NIC at half its rate bounds the ring at about half the busbw, far below.
      - busbw >= {BW_MARGIN} x model at >= {format_size(start['size_bytes'])}
{published_line}
      - wrong == 0
      - no regression > 5 % vs baseline
{_expected_check(topo, nodes, expected, published) if topo.gpus_per_node else ""}{_node_check(topo) if topo.gpus_per_node else ""}  - name: all_reduce-latency
    kind: commbench
    collective: all_reduce
    nodes: {nodes}
    min_bytes: 8
    max_bytes: {format_size(LATENCY_MAX)}
    step_factor: 8
    thresholds:
      # The model's 8-byte time is {small['predicted_time_us']:.1f} us{picks(small)}: NCCL's own base and per-hop \
latencies
      # (src/graph/tuning.cc). Margin: {LATENCY_MARGIN} x the model's time at each size, for what NCCL's model \
leaves out
      # and a measured time includes (each call's kernel launch and host-side proxy work, a few us).
      - time_us <= {LATENCY_MARGIN} x model at <= {format_size(LATENCY_MAX)}
      - wrong == 0
  - name: strategies
    kind: commbench
    strategy: [ring, rs-ag, chunked]
    nodes: {nodes}
    min_bytes: 64M
    max_bytes: 256M
    step_factor: 4
    repeats: 3
    thresholds:
      - wrong == 0
      - no regression > 5 % vs baseline
  - name: checkpoint-storage
    kind: iobench
    mounts: [/raid]            # EDIT: the checkpoint mount(s)
    profiles: [shard-write, small-random-write]
    thresholds:
      # EDIT: from your storage's datasheet; 2000 MB/s and 2 ms are placeholders for a local NVMe RAID.
      - shard-write MB/s >= 2000
      - small-random-write P99 <= 2 ms
  - name: checkpoint-llama3-8b
    kind: checkpoint           # iobench model-ckpt: MLPerf Storage's llama3-8b layout, torch ranks, fsync per file
    mount: /raid               # EDIT: the checkpoint mount; on shared storage (/mnt/lustre, /mnt/cephfs) the same
    model: llama3-8b
    scale: 0.01                # 1/100 of the 105 GiB checkpoint: 1.1 GB, 8 files x 2
    writes: 3
    reads: 3
    thresholds:
      # EDIT: placeholders for a local NVMe RAID (shared storage: its per-client rate). A phase a cache served
      # (under 0.9 of its bytes counted at the device or the network client) has no MB/s and fails.
      - llama3-8b-ckpt min_rank_mbps >= 200
      - llama3-8b-ckpt duration_s <= 30 s
      - wrong == 0
"""


def _expected_check(topo, nodes, expected, published):
    """The `expected` check: commbench judge's verdict on a run at the large sizes (NVLS where NVLS is expected)."""
    size = format_size(published[1]) if published else "8G"
    return f"""  - name: all_reduce-expected-level
    kind: expected
    collective: all_reduce
    nodes: {nodes}
    min_bytes: {size}
    max_bytes: {size}
    thresholds:
      # commbench judge's verdict (run --judge): the model expects {expected} here; a node at the wrong level
      # (ring-level where NVLS is expected: NCCL_NVLS_ENABLE, nvidia-fabricmanager, the driver), below 0.9 of
      # the published or modelled level, or above every ceiling fails this check.
      - wrong == 0
"""


def _node_check(topo):
    """The `node` check: commbench node's quick level on the node accept runs on (its Prolog's), against the
    topology's GPUs, NVLinks and InfiniBand ports."""
    links = topo.nvlink_links if topo.fabric in ("nvswitch", "nvlink") else 0
    return f"""  - name: node-health
    kind: node
    level: quick               # counters and state, no load, a few seconds; full: a load on every GPU (30 s)
    # commbench node judges each GPU and InfiniBand port itself (commbench/health/checks.py): DCGM's hardware limits
    # and health watch (NVIDIA/DCGM 72fa3fe: retired pages 63, row-remap failure, uncorrectable ECC, NVLink replay
    # and recovery errors, PCIe replays), NVIDIA's row-remap RMA policy, gpud's ports; expected from the topology:
    # {topo.gpus_per_node} GPUs, {links} NVLinks each, {topo.nics_per_node} InfiniBand ports at \
{topo.nic_gbps * 8:g} Gb/s. A failing GPU
    # or port fails the check, and --on-fail drain drains that node alone, the failing item as the reason.
"""
