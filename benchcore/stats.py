"""Is a difference real? The time ratio of two sets of repeats with a confidence interval.

Method (said in every verdict as METHOD): Welch's t interval on the difference of the mean log times,
exponentiated, so the ratio is that of the geometric means and the interval is asymmetric as ratios
are. Repeats of a timing are right-skewed and their spread grows with the mean; logs make them closer
to normal with one spread. Welch-Satterthwaite degrees of freedom; the t quantile is computed here
(no scipy). With one value on a side there is no spread, and so no interval: callers say so.
"""
import math
from dataclasses import dataclass

METHOD = "Welch t on log times, 95% interval of the geometric-mean ratio"
CONFIDENCE = 0.95


def _t_cdf(x, df):
    """P(T <= x) for Student's t with df degrees of freedom (df may be fractional), Simpson's rule."""
    if x == 0:
        return 0.5
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    steps = 2000
    h = abs(x) / steps
    total = 0.0
    for i in range(steps + 1):
        weight = 1 if i in (0, steps) else (4 if i % 2 else 2)
        total += weight * math.exp(log_norm - (df + 1) / 2 * math.log1p((i * h) ** 2 / df))
    area = total * h / 3
    return 0.5 + area if x > 0 else 0.5 - area


def t_quantile(p, df):
    """The p quantile of Student's t (0.5 < p < 1), by bisection on the CDF."""
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < p:
        high *= 2
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if _t_cdf(mid, df) < p else (low, mid)
    return (low + high) / 2


@dataclass(frozen=True)
class Ratio:
    """a/b as a ratio of geometric means, with its interval [low, high]."""
    ratio: float
    low: float
    high: float
    n_a: int
    n_b: int

    def beyond(self, threshold=0.0):
        """True when the whole interval lies more than threshold (0.05 = 5 %) away from 1, either way."""
        return self.low > 1 + threshold or self.high < 1 / (1 + threshold)

    def text(self):
        return f"{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}]"


def _mean_var(logs):
    mean = sum(logs) / len(logs)
    return mean, sum((v - mean) ** 2 for v in logs) / (len(logs) - 1)


def ratio_interval(a, b, confidence=CONFIDENCE):
    """Ratio of a's to b's times with a Welch t interval; None when either side has fewer than 2 values
    or a value is not positive."""
    if len(a) < 2 or len(b) < 2 or min(list(a) + list(b)) <= 0:
        return None
    (mean_a, var_a), (mean_b, var_b) = _mean_var([math.log(v) for v in a]), _mean_var([math.log(v) for v in b])
    ratio = math.exp(mean_a - mean_b)
    sa, sb = var_a / len(a), var_b / len(b)
    se = math.sqrt(sa + sb)
    if se == 0:
        return Ratio(ratio, ratio, ratio, len(a), len(b))
    df = (sa + sb) ** 2 / ((sa ** 2 / (len(a) - 1) if sa else 0) + (sb ** 2 / (len(b) - 1) if sb else 0))
    half = t_quantile(0.5 + confidence / 2, df) * se
    return Ratio(ratio, math.exp(mean_a - mean_b - half), math.exp(mean_a - mean_b + half), len(a), len(b))


def geometric_mean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None
