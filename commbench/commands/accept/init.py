"""`commbench accept --init`: a starting spec for a topology and node count, its numbers from the model."""
import json
import shlex

from benchcore.inputs import shown
from commbench.commands.model import predictions
from commbench.model.topology import resolve
from commbench.plan import CaseOptionsText


def init_text(topology, nodes):
    """A starting spec for a topology and node count, each number's reason in a comment. What came from the user
    is quoted: the topology as a YAML (JSON) string, in comments without control characters."""
    topo = resolve(topology)
    said, name = shown(shlex.quote(topology), 300), shown(topo.name, 100)
    local = topo.gpus_per_node or 2
    backend = "nccl" if topo.gpus_per_node else "gloo"
    big = predictions(topo, ["all_reduce"], [1 << 30], nodes, local, backend, CaseOptionsText().parse())[0]
    small = predictions(topo, ["all_reduce"], [8], nodes, local, backend, CaseOptionsText().parse())[0]
    return f"""# Acceptance spec for {nodes} node(s) of {name}
#   (commbench accept --init --topology {said} --nodes {nodes}).
# Run: commbench accept --spec THIS.yaml --out accept-$(date +%F)/ [--baseline last-good/results.jsonl]
# Numbers come from the topology {name} through the model (commbench model --topology {said}
# --nodes {nodes} --collective all_reduce -b 8 -e 1G -f 1024). Edit the mounts before running.
topology: {json.dumps(topology)}
checks:
  - name: all_reduce-bandwidth
    kind: commbench
    collective: all_reduce
    nodes: {nodes}
    min_bytes: 256M
    max_bytes: 1G
    step_factor: 2
    iters: 20
    warmup: 5
    thresholds:
      # all_reduce at 1G on {nodes} x {local} ranks is bound by the {big['link_tier']} tier: link peak
      # {big['link_peak_gbps']:.1f} GB/s busbw; 0.8 of it is what a healthy fabric reaches with NCCL.
      - busbw >= 0.8 x link peak at >= 256M
      - wrong == 0
      - no regression > 5 % vs baseline
  - name: all_reduce-latency
    kind: commbench
    collective: all_reduce
    nodes: {nodes}
    min_bytes: 8
    max_bytes: 64K
    step_factor: 8
    thresholds:
      # the model's 8-byte time is {small['predicted_time_us']:.1f} us (per-step latency x steps); allow 2x.
      - time_us <= 2 x model at 8B
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
"""
