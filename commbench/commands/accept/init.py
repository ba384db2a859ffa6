"""`commbench accept --init`: a starting spec for a topology and node count, its numbers from the model."""
import json
import shlex

from benchcore.errors import UserError
from benchcore.inputs import shown
from benchcore.units import format_size
from commbench.commands.model import predictions
from commbench.commands.options import CaseOptionsText
from commbench.model.topology import resolve

# The thresholds' margins under the model, and why (each is written beside its threshold).
FULL = 0.9            # the bandwidth check starts where the model's busbw reaches this share of the link peak
BW_MARGIN = 0.85      # busbw >= this x the model's busbw there
LATENCY_MARGIN = 2    # time_us <= this x the model's time at the latency check's sizes
LATENCY_MAX = 64 << 10
SIZES = [1 << k for k in range(20, 35)]   # 1M .. 16G, where the bandwidth check may start


def _start(rows):
    """The first row whose model busbw reaches FULL of the link peak (else the one closest to it)."""
    return next((r for r in rows if r["link_utilization"] >= FULL), max(rows, key=lambda r: r["link_utilization"]))


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
    reached = (f"is the first size where the model reaches {FULL} of the link peak" if start["link_utilization"] >= FULL
               else f"is where the model comes closest to the link peak (it never reaches {FULL} of it up to 16G)")
    picks = lambda r: f", NCCL {r['nccl_algo']}" if r["nccl_algo"] else ""   # noqa: E731
    return f"""# Acceptance spec for {nodes} node(s) of {name}
#   (commbench accept --init --topology {said} --nodes {nodes}).
# Run: commbench accept --spec THIS.yaml --out accept-$(date +%F)/ [--baseline last-good/results.jsonl]
# Numbers come from the topology {name} through the model (commbench model --topology {said}
# --nodes {nodes} --collective all_reduce -b 8 -e 16G -f 2); each threshold is a stated margin under it.
# Edit the mounts before running.
topology: {json.dumps(topology)}
checks:
  - name: all_reduce-bandwidth
    kind: commbench
    collective: all_reduce
    nodes: {nodes}
    min_bytes: {format_size(start['size_bytes'])}
    max_bytes: {format_size(max(start['size_bytes'], 1 << 30))}
    step_factor: 2
    iters: 20
    warmup: 5
    thresholds:
      # all_reduce on {nodes} x {local} ranks is bound by the {start['link_tier']} tier: link peak
      # {start['link_peak_gbps']:.1f} GB/s busbw. {format_size(start['size_bytes'])} {reached}: busbw \
{start['busbw_gbps']:.1f} GB/s
      # ({start['link_utilization']:.2f} of peak{picks(start)}). Margin: {BW_MARGIN} x the model's busbw at each \
size ({100 - BW_MARGIN * 100:.0f} % under
      # it), for what the model leaves out (kernel and proxy overheads, NCCL's channel count, congestion); a link
      # or NIC at half its rate bounds the ring at about half the busbw, far below.
      - busbw >= {BW_MARGIN} x model at >= {format_size(start['size_bytes'])}
      - wrong == 0
      - no regression > 5 % vs baseline
  - name: all_reduce-latency
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
