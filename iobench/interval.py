"""The checkpoint interval a storage affords (model-ckpt --save-mode): from what one checkpoint costs training and the
job's mean time between failures, Young's optimal interval and the share of training lost.

Young (J. W. Young, "A first order approximation to the optimum checkpoint interval", CACM 17(9), 1974; Daly's
higher-order form, FGCS 22(3), 2006, differs from it by less than the cost itself when cost << MTBF): the interval
tau = sqrt(2 x cost x MTBF). Lost per unit of training: cost / tau (checkpointing) + (tau / 2 + exposed + restart) /
MTBF (a failure loses half an interval on average, plus the time the last save was not yet durable after training
resumed, plus the restart). A background save must end before the next starts, so tau is never below it.

The default MTBF scales with the job's GPUs from the largest public failure record we know of: Meta's Llama 3 paper
(A. Grattafiori et al., "The Llama 3 Herd of Models", arXiv 2407.21783, section 3.3.4 and Table 5): 419 unexpected
interruptions in a 54-day snapshot of pre-training on up to 16,384 H100 GPUs, one per 50,676 GPU-hours.
"""
import math

LLAMA3_GPU_HOURS = 54 * 24 * 16384 / 419
MTBF_SOURCE = ("Llama 3 (arXiv 2407.21783, sec. 3.3.4, Table 5): 419 unexpected interruptions in 54 days on 16,384 "
               "H100s = one per 50,676 GPU-hours")


def job_mtbf_h(gpus, gpu_hours=LLAMA3_GPU_HOURS):
    """The job's MTBF in hours when each GPU-hour fails as often as Llama 3's run did."""
    return gpu_hours / gpus


def plan(cost_s, mtbf_s, background_s=0.0, exposed_s=0.0, restart_s=0.0):
    """{'interval_s': Young's interval (at least the background save), 'training_lost': the share of training lost
    to checkpointing and expected rework, 'checkpoint_share', 'rework_share'}; None when nothing costs anything."""
    tau = max(math.sqrt(2 * cost_s * mtbf_s), background_s)
    if tau <= 0:
        return None
    checkpointing, rework = cost_s / tau, (tau / 2 + exposed_s + restart_s) / mtbf_s
    return {"interval_s": tau, "training_lost": checkpointing + rework, "checkpoint_share": checkpointing,
            "rework_share": rework}
