"""Student's t, for decisions on a noise estimated from few runs: a line drawn in sigma as if sigma
were known moves to the same one-sided tail probability of t on the estimate's degrees of freedom
(`t_line`). No SciPy: the regularized incomplete beta function by its continued fraction."""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist


@lru_cache(maxsize=4096)
def student_t_quantile(p: float, dof: float | None) -> float:
    """The `p` quantile of Student's t distribution with `dof` degrees of freedom; the standard
    normal's for `dof` None or infinite. Bisection on the exact upper tail (`student_t_tail`) to
    a relative 1e-12, so table values hold to every printed digit (tests/test_noise_pooled.py);
    cached, as a campaign asks for the same few lines again and again."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must lie strictly between 0 and 1, not {p!r}")
    if dof is None or math.isinf(dof):
        return NormalDist().inv_cdf(p)
    if dof <= 0:
        raise ValueError(f"dof must be positive, not {dof!r}")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, dof)
    tail = 1.0 - p
    low, high = 0.0, 1.0
    while student_t_tail(high, dof) > tail:
        low, high = high, 2.0 * high
    while high - low > 1e-12 * high:
        middle = (low + high) / 2
        if student_t_tail(middle, dof) > tail:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def student_t_tail(t: float, dof: float) -> float:
    """P(T > t) for Student's t with `dof` degrees of freedom: I_x(dof/2, 1/2) / 2 at
    x = dof / (dof + t^2), the regularized incomplete beta function."""
    half = 0.5 * _incomplete_beta(dof / 2, 0.5, dof / (dof + t * t))
    return half if t >= 0 else 1.0 - half


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (modified
    Lentz), on the side of x where the fraction converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300  # keeps a zero denominator from dividing by zero; its term then dominates
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= d * c
        if abs(d * c - 1.0) < 1e-15:
            return fraction
    raise ArithmeticError(f"incomplete beta ({a}, {b}, {x}) did not converge")


@lru_cache(maxsize=4096)
def t_line(z: float, dof: int | None) -> float:
    """A line drawn in sigma for an exactly known sigma, moved to the same one-sided tail
    probability of Student's t with `dof` degrees of freedom: what a margin of `z` sigma asks of
    a sigma estimated from `dof` degrees of freedom. `dof` None: `z` itself."""
    if dof is None or math.isinf(z):
        return z
    return student_t_quantile(NormalDist().cdf(z), dof)
