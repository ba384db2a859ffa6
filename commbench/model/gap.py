"""The model against what was measured: a row whose time is outside the model's band is called out under the table.

The band is MODEL_BAND, measured time over the model's: the model is NCCL's latency and bandwidth terms on the
topology's links (commbench/model/alphabeta.py), within 0.93-1.00 of shaped links (`commbench selftest model`), but
it leaves out each call's launch and proxy overhead, so at small sizes a time up to 2 x the model is normal (the
acceptance spec's small-message rule, `time_us <= 2 x model`, holds it there for the same reason). Outside the band the
topology is not this machine: slower, the link, the machine (a busy one: see the spread marks) or the topology's
rates above the hardware's; faster, the topology's rates or latency below the hardware's."""
from benchcore.units import format_size

MODEL_BAND = (0.5, 2.0)
SHOWN = 2           # the rows named on each side: the farthest from the model
MEANS = {"slower": "the link, a busy machine (see Spread) or a topology above it (judge)",
         "faster": "the topology is below this machine: commbench topo --calibrate fits one"}


def gap_lines(recs):
    """Lines under the table where measurements are outside the model's band: how many, the farthest on each side,
    what each side means; [] where every measurement with a model time is in the band (or none has one)."""
    judged = [(r["time_us"] / r["predicted_time_us"], r) for r in recs
              if r.get("time_us") and r.get("predicted_time_us")]
    low, high = MODEL_BAND
    sides = {"slower": sorted((x for x in judged if x[0] > high), key=lambda x: -x[0]),
             "faster": sorted((x for x in judged if x[0] < low), key=lambda x: x[0])}
    outside = sum(map(len, sides.values()))
    if not outside:
        return []
    lines = [f"# {'Model gap':<20} : {outside} of {len(judged)} measurements outside {low:g}-{high:g} x the model's "
             f"time ({recs[0].get('topology')})"]
    for side, rows in sides.items():
        if rows:
            named = ", ".join(f"{r['collective']} {format_size(r['size_bytes'])} {'in' if r.get('in_place') else 'out'}"
                              f" {ratio:.2f} x" for ratio, r in rows[:SHOWN])
            lines += [f"# {f'  {side} ({len(rows)})':<20} : {named}" + (" ..." if len(rows) > SHOWN else ""),
                      f"# {f'  {side} means':<20} : {MEANS[side]}"]
    return lines
