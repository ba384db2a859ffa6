"""Is a difference real? The time ratio of two sets of repeats with a confidence interval.

Method (said in every verdict as METHOD): Welch's t interval on the difference of the mean log times,
exponentiated, so the ratio is that of the geometric means and the interval is asymmetric as ratios
are. Repeats of a timing are right-skewed and their spread grows with the mean; logs make them closer
to normal with one spread. Welch-Satterthwaite degrees of freedom; the t quantile is computed here
(no scipy: bisection on the t distribution function, from the regularized incomplete beta function).
With one value on a side there is no spread, and so no interval: callers say so.
"""
import math
from dataclasses import dataclass

METHOD = "Welch t on log times, 95% interval of the geometric-mean ratio"
CONFIDENCE = 0.95


def _beta_fraction(a, b, x):
    """The continued fraction of the regularized incomplete beta function, by the modified Lentz method."""
    tiny = 1e-300

    def clamp(v):
        return v if abs(v) > tiny else tiny
    c, d = 1.0, 1 / clamp(1 - (a + b) * x / (a + 1))
    result = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 / clamp(1 + numerator * d)
            c = clamp(1 + numerator / c)
            result *= c * d
        if abs(c * d - 1) < 1e-14:
            break
    return result


def _incomplete_beta(a, b, x):
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1 - front * _beta_fraction(b, a, 1 - x) / b


def _t_cdf(x, df):
    """P(T <= x) for Student's t with df degrees of freedom (df may be fractional)."""
    tail = 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + x * x))
    return 1 - tail if x >= 0 else tail


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


def _exp(x):
    """e**x held to what a float holds (an interval's end for times 1e300 apart is beyond it)."""
    return math.exp(max(-708.0, min(x, 709.0)))


def ratio_interval(a, b, confidence=CONFIDENCE):
    """Ratio of a's to b's times with a Welch t interval; None when either side has fewer than 2 values
    or a value is not positive."""
    if len(a) < 2 or len(b) < 2 or min(list(a) + list(b)) <= 0:
        return None
    (mean_a, var_a), (mean_b, var_b) = _mean_var([math.log(v) for v in a]), _mean_var([math.log(v) for v in b])
    ratio = _exp(mean_a - mean_b)
    sa, sb = var_a / len(a), var_b / len(b)
    se = math.sqrt(sa + sb)
    if se == 0:
        return Ratio(ratio, ratio, ratio, len(a), len(b))
    df = (sa + sb) ** 2 / ((sa ** 2 / (len(a) - 1) if sa else 0) + (sb ** 2 / (len(b) - 1) if sb else 0))
    half = t_quantile(0.5 + confidence / 2, df) * se
    return Ratio(ratio, _exp(mean_a - mean_b - half), _exp(mean_a - mean_b + half), len(a), len(b))


def geometric_mean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None
