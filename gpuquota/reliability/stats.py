"""Exact Poisson statistics without SciPy: the Garwood confidence interval of a rate, the
upper tail of a count, the conditional (binomial) test of two rates and Fisher's
combination of independent p-values."""

import math
from functools import lru_cache

Z = 1e-300


def _log_pmf(k: int, mu: float) -> float:
    return k * math.log(mu) - mu - math.lgamma(k + 1) if mu > 0 else (0.0 if k == 0 else -math.inf)


def poisson_cdf(k: int, mu: float) -> float:
    """P(X <= k) for X ~ Poisson(mu)."""
    if k < 0:
        return 0.0
    if mu <= 0:
        return 1.0
    total, term = 0.0, math.exp(-mu)
    if term > 0:  # small mu: the plain series
        for i in range(k + 1):
            total += term
            term *= mu / (i + 1)
        return min(1.0, total)
    return min(1.0, sum(math.exp(_log_pmf(i, mu)) for i in range(k + 1)))


def poisson_sf(k: int, mu: float) -> float:
    """P(X >= k) for X ~ Poisson(mu): the p-value of seeing k or more where mu is expected."""
    if k <= 0:
        return 1.0
    if mu <= 0:
        return 0.0
    if k > mu:  # sum the tail directly: exact for small p-values
        total, i = 0.0, k
        while True:
            term = math.exp(_log_pmf(i, mu))
            total += term
            if term < total * 1e-16 or i > k + 10_000:
                return min(1.0, total)
            i += 1
    return max(0.0, 1.0 - poisson_cdf(k - 1, mu))


def _bisect(f, lo: float, hi: float) -> float:
    for _ in range(200):
        mid = (lo + hi) / 2
        if f(mid):
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2


@lru_cache(maxsize=4096)  # a few counts recur across a fleet's GPUs and nodes
def poisson_ci(k: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Garwood) interval of a Poisson mean after observing k events."""
    alpha = 1 - confidence
    upper_hi = k + 10 * math.sqrt(k + 1) + 10
    upper = _bisect(lambda mu: poisson_cdf(k, mu) <= alpha / 2, 0.0, upper_hi)
    lower = 0.0 if k == 0 else _bisect(lambda mu: poisson_sf(k, mu) >= alpha / 2, 0.0, k)
    return lower, upper


def binomial_sf(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    lp, lq = math.log(p), math.log1p(-p)
    return min(1.0, sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                                 + i * lp + (n - i) * lq) for i in range(k, n + 1)))


def rate_excess_p(*, k_recent: int, t_recent: float, k_base: int, t_base: float) -> float:
    """One-sided p-value that the recent rate exceeds the base rate: given the total count,
    the recent count is binomial with the recent share of exposure (the conditional test)."""
    if t_recent <= 0 or t_base <= 0:
        return 1.0
    return binomial_sf(k_recent, k_recent + k_base, t_recent / (t_recent + t_base))


def fisher_p(p_values: list[float]) -> float:
    """Fisher's combined p-value of independent tests: P(chi-square with 2k degrees of
    freedom >= -2 sum(ln p)), in closed form q * sum((-ln q)^i / i!, i < k) with q the
    product of the k p-values. Valid (conservative) for discrete p-values such as
    Poisson tails, since each is then at least as likely to be large as a uniform one."""
    q = math.prod(p_values)
    if q <= 0:
        return 0.0
    x, term, total = -math.log(q), 1.0, 1.0
    for i in range(1, len(p_values)):
        term *= x / i
        total += term
    return min(1.0, q * total)
