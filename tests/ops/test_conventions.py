"""The values gcompile gives where a function has a kink, a tie, a pole or an infinity: one row per
line of the README's convention table, each checked on the float64 reference evaluator and on
ONNX Runtime. The expected numbers are PyTorch 2.13's (JAX's where the README says so)."""
import numpy as np
import pytest

import gcompile as gc
import gcompile.functions as F

from ..opcheck import check_values

inf, nan = np.inf, np.nan


def value_and_grad(f, *argnums):
    """x... -> (f(x...), its gradients w.r.t. the operands at `argnums` (default: all))."""
    def run(*xs):
        y = f(*xs)
        wanted = [xs[i] for i in (argnums or range(len(xs)))]
        return [y, *gc.grad(F.sum(y), wanted)]
    return run


def a(*values):
    return np.array(values, np.float64)


CONVENTIONS = {  # name: (function, inputs, [value, gradients...])
    "relu at 0": (F.relu, [a(0.0, -1, 2)], [a(0, 0, 2), a(0, 0, 1)]),
    "abs at 0": (F.abs, [a(0.0, -1, 2)], [a(0, 1, 2), a(0, -1, 1)]),
    "maximum ties and NaN": (F.maximum, [a(1.0, 2, 1, nan), a(1.0, 1, 3, 1)],
                             [a(1, 2, 3, nan), a(0.5, 1, 0, 1), a(0.5, 0, 1, 1)]),
    "minimum ties and NaN": (F.minimum, [a(1.0, 2, 1, nan), a(1.0, 1, 3, 1)],
                             [a(1, 1, 1, nan), a(0.5, 0, 1, 1), a(0.5, 1, 0, 1)]),
    "max reduction ties": (F.max, [a(1.0, 3, 3)], [3.0, a(0, 0.5, 0.5)]),
    "min reduction ties": (F.min, [a(1.0, 1, 3)], [1.0, a(0.5, 0.5, 0)]),
    "clip at the bounds": (lambda x: F.clip(x, -1.0, 1.0), [a(-1.0, 1, 0, 2, -3, nan)],
                           [a(-1, 1, 0, 1, -1, nan), a(1, 1, 1, 0, 0, 0)]),
    "clip with tensor bounds": (F.clip, [a(-1.0, 1, 0, 2, -3), a(-1.0), a(1.0)],
                                [a(-1, 1, 0, 1, -1), a(1, 1, 1, 0, 0), a(1.0), a(1.0)]),
    "pow at base 0": (F.power, [a(0.0, 0, 0), a(2.0, 0, -1)], [a(0, 1, inf), a(0, 0, -inf), a(0, 0, -inf)]),
    "prod with one zero": (F.prod, [a(2.0, 0, 3)], [0.0, a(0, 6, 0)]),
    "prod with two zeros": (F.prod, [a(2.0, 0, 0)], [0.0, a(0, 0, 0)]),
    "logsumexp with +inf": (F.logsumexp, [a(inf, 1, 2)], [inf, a(nan, 0, 0)]),
    "logsumexp of only -inf": (F.logsumexp, [a(-inf, -inf, -inf)], [-inf, a(nan, nan, nan)]),
    "logsumexp with some -inf": (F.logsumexp, [a(-inf, 1, -inf)], [1.0, a(0, 1, 0)]),
    "log1p at the ends": (F.log1p, [a(inf, -1, -inf, nan)], [a(inf, -inf, nan, nan), a(0, inf, -0.0, nan)]),
    "expm1 at the ends": (F.expm1, [a(inf, -inf, nan)], [a(inf, -1, nan), a(inf, 0, nan)]),
}


@pytest.mark.parametrize("name", sorted(CONVENTIONS))
def test_convention(name):
    fn, inputs, expected = CONVENTIONS[name]
    check_values(value_and_grad(fn), inputs, expected)
