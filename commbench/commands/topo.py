"""`commbench topo`: this node's GPUs, NICs and links (commbench/model/detect.py), and the topology file
they match."""
import json

import click

from benchcore.errors import UserError, shown
from benchcore.files import write_new_text
from benchcore.report.render import print_table
from benchcore.results.records import new_output_option
from commbench.model.detect import detect, in_effect, interfaces, match, unreported


@click.command("topo")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of text.")
@click.option("--link", default=None, metavar="IFACE",
              help="The interface that joins the nodes [default: the default route's, else the only one up].")
@click.option("--calibrate", is_flag=True,
              help="Measure this machine's ceilings (memory copy for shared memory, loopback TCP streams, a tc-shaped "
                   "link's rate) and print a topology file for --topology; util is then busbw over them.")
@click.option("--out", default=None, metavar="FILE", callback=new_output_option("--out", (".yaml", ".yml")),
              help="With --calibrate: write the topology file here (never over an existing file).")
def topo(as_json, link, calibrate, out):
    """Show this node's GPUs, NICs and links, and the topology file it matches; or calibrate its ceilings.

    \b
    Example:
      commbench topo
      commbench topo --json > node.json
      commbench topo --calibrate --out mine.yaml && commbench run --topology mine.yaml
    """
    if out and not calibrate:
        raise UserError("--out goes with --calibrate (the topology file it writes)")
    if link is not None:
        names = [n["name"] for n in interfaces()]
        if link not in names:
            raise UserError(f"--link {shown(repr(link), 40)}: no such interface on this node (it has "
                            f"{shown(', '.join(names))})")
    if calibrate:
        if as_json:
            raise UserError("--json: not with --calibrate, which prints a topology file (YAML)")
        return write_calibration(link, out)
    found = detect(link)
    fields = found["fields"]
    matched, closest, diffs = match(fields)
    effect = in_effect(fields)
    if as_json:
        click.echo(json.dumps({**found, "match": matched.name if matched else "unknown", "closest": closest.name,
                               "differences": diffs, "not_reported": unreported(fields),
                               "in_effect": effect.as_dict()}, indent=1))
        return
    if found["gpus"] is None:
        click.echo(f"GPUs: none: {found['why_no_gpus']}; CPU and network topology only")
    else:
        print_gpus(found["gpus"])
        for note in found["notes"]:
            click.echo(note)
    cpu = found["cpu"]
    click.echo(f"CPU: {cpu['model']}, {cpu['cpus']} CPUs; NUMA " +
               ", ".join(f"{k}: cpus {v}" for k, v in cpu["numa_nodes"].items()))
    rows = [{"name": p["device"] + f"/{p['port']}", "kind": p["link_layer"], "state": p["state"], "rate": p["rate"]}
            for p in found["ib"]]
    rows += [{"name": n["name"], "kind": "loopback" if n["loopback"] else "ethernet", "state": n["state"],
              "mtu": n["mtu"], "rate": f"{n['speed_mbit']} Mb/s" if n["speed_mbit"] else "not reported",
              "shaped": f"tc tbf {n['shaped_bits'] / 1e6:g} Mbit/s" if n["shaped_bits"] else "",
              "role": "inter-node link" if n["name"] == found["link"] else
              "intra-node link" if n["loopback"] and not found["gpus"] else ""} for n in found["net"]]
    print_table(rows, [("name", "NIC", None), ("kind", "kind", None), ("state", "state", None), ("mtu", "mtu", None),
                       ("rate", "rate (sysfs)", None), ("shaped", "shaped", None), ("role", "role", None)],
                title="network" + ("" if found["ib"] else " (no InfiniBand/RoCE ports in /sys/class/infiniband)"))
    missing = unreported(fields)
    note = f"; not reported here: {', '.join(missing)}" if missing else ""
    if matched:
        click.echo(f"topology: {matched.name} (matches{note})")
    else:
        click.echo(f"topology: unknown; closest {closest.name}, differs in {'; '.join(diffs)}{note}")
    click.echo(f"in effect for records: {effect.name}: intra-node {effect.fabric} {effect.intra_gbps:g} GB/s "
               f"(ceiling: {effect.intra_ceiling}), inter-node {effect.inter_fabric} {effect.nics_per_node} x "
               f"{effect.nic_gbps:g} GB/s x {effect.payload_fraction:.3f} payload ({effect.rank_to_nic}; ceiling: "
               f"{effect.inter_ceiling})")


def write_calibration(link, out):
    from commbench.model import calibrate
    text = calibrate.file_text(calibrate.measure(link))
    if not out:
        click.echo(text, nl=False)
        return
    write_new_text(out, text, "--out")   # new_output refused an existing file; this refuses one made since
    click.echo("".join(ln[1:] + "\n" for ln in text.splitlines() if ln.startswith("#")), nl=False)
    click.echo(f"wrote {out}: commbench run --topology {out}")


def print_gpus(found):
    gpu_rows = [{**g, "memory": f"{g['memory_bytes'] / 2**30:.0f} GiB",
                 "nvlink": f"{sum(1 for x in g['nvlinks'] if x['active'])}/{len(g['nvlinks'])} active, "
                           f"v{next((x['version'] for x in g['nvlinks'] if x['active']), '-')}, "
                           f"{g['nvlink_gbps']:g} GB/s" if g["nvlinks"] else "none"} for g in found["gpus"]]
    print_table(gpu_rows, [("index", "GPU", "d"), ("name", "name", None), ("memory", "memory", None),
                           ("nvlink", "NVLink", None), ("pcie", "PCIe", None), ("numa_node", "NUMA", None),
                           ("cpu_affinity", "CPU affinity", None)], title="GPUs (NVML)")
    heads = [f"GPU{i}" for i in range(len(found["paths"]))]
    rows = [{"gpu": h, **dict(zip(heads, row))} for h, row in zip(heads, found["paths"])]
    print_table(rows, [("gpu", "", None)] + [(h, h, None) for h in heads],
                title="GPU-to-GPU paths (NV# NVLink, PIX one PCIe switch, PXB several, PHB host bridge, "
                      "NODE same NUMA node, SYS across sockets)")
