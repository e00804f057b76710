"""The values gcompile gives where a function has a kink, a tie, a pole or an infinity: one row per
line of the convention table in docs/guide/gradients.md, each checked on the float64 reference evaluator and on
ONNX Runtime. The expected numbers are PyTorch 2.13's (JAX's where the table says so)."""
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


def f32(*values):
    """float32 inputs, for ops that ONNX Runtime's CPU provider runs in float32 only."""
    return np.array(values, np.float32)


EULER = 0.5772156649015329


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
    "fmax ties and NaN": (F.fmax, [a(nan, 1, 2, nan, 1), a(1.0, nan, 2, nan, 3)],
                          [a(1, 1, 2, nan, 3), a(0, 1, 1, 1, 0), a(1, 0, 0, 0, 1)]),
    "fmin ties and NaN": (F.fmin, [a(nan, 1, 2, nan, 1), a(1.0, nan, 2, nan, 3)],
                          [a(1, 1, 2, nan, 1), a(0, 1, 1, 1, 1), a(1, 0, 0, 0, 0)]),
    "hardtanh at the bounds": (F.hardtanh, [a(-1.0, 1, 0, 2)], [a(-1, 1, 0, 1), a(0, 0, 1, 0)]),
    "relu6 at 0 and 6": (F.relu6, [a(0.0, 6, 3)], [a(0, 6, 3), a(0, 0, 1)]),
    "hardsigmoid at ±3": (F.hardsigmoid, [a(-3.0, 3, 0, -4, 4)], [a(0, 1, 0.5, 0, 1), a(0, 0, 1 / 6, 0, 0)]),
    "hardswish at ±3": (F.hardswish, [a(-3.0, 3, 0, -4, 4)], [a(-0.0, 3, 0, -0.0, 4), a(0, 1, 0.5, 0, 1)]),
    "softshrink at ±lambda": (F.softshrink, [a(-0.5, 0.5, 0, 1)], [a(0, 0, 0, 0.5), a(0, 0, 0, 1)]),
    "hardshrink at ±lambda": (F.hardshrink, [a(-0.5, 0.5, 0, 1)], [a(0, 0, 0, 1), a(0, 0, 0, 1)]),
    "threshold at the threshold": (lambda x: F.threshold(x, 0.5, -2.0), [a(0.5, 0.6, 0)],
                                   [a(-2, 0.6, -2), a(0, 1, 0)]),
    "prelu at 0": (F.prelu, [a(0.0, -1, 1), a(0.25)], [a(0, -0.25, 1), a(0.25, 0.25, 1), a(-1.0)]),
    "celu at 0": (lambda x: F.celu(x, 2.0), [a(0.0, -1, 1)], [a(0, 2 * np.expm1(-0.5), 1), a(1, np.exp(-0.5), 1)]),
    "mish at the ends": (F.mish, [a(-inf, inf)], [a(nan, inf), a(nan, nan)]),
    "logsigmoid at the ends": (F.logsigmoid, [a(-1000.0, 1000, -inf, inf)], [a(-1000, 0, -inf, 0), a(1, 0, 1, 0)]),
    "softsign at the ends": (F.softsign, [a(0.0, -inf, inf)], [a(0, nan, nan), a(1, nan, nan)]),
    "tanhshrink at the ends": (F.tanhshrink, [a(0.0, -inf, inf)], [a(0, -inf, inf), a(0, 1, 1)]),
    "sort ties": (lambda x: F.sort(x) * a(1.0, 2, 3), [a(3.0, 1, 3)], [a(1, 6, 9), a(2, 1, 3)]),
    "topk ties": (lambda x: F.topk(x, 2)[0] * a(1.0, 2), [a(3.0, 1, 3, 2, 3)], [a(3, 6), a(1, 0, 2, 0, 0)]),
    "median ties": (F.median, [a(3.0, 1, 3, 3)], [3.0, a(1, 0, 0, 0)]),
    "argmax ties and NaN": (lambda x: F.cast(F.argmax(x), "float64") + F.cast(F.argmin(x[:3]), "float64") * 10,
                            [a(1.0, nan, 3, nan)], [11.0, a(0, 0, 0, 0)]),
    "vector_norm at 0": (lambda x: F.stack([F.vector_norm(x, p) for p in (2, 1, np.inf, -np.inf, 3, 0.5)]),
                         [a(0.0, 0, 0)], [a(0, 0, 0, 0, 0, 0), a(0, 0, 0)]),
    "vector_norm inf ties": (lambda x: F.vector_norm(x, np.inf), [a(1.0, -2, 2)], [2.0, a(0, -0.5, 0.5)]),
    "std of a constant": (F.std, [a(1.0, 1, 1)], [0.0, a(0, 0, 0)]),
    "xlogy at x = 0": (F.xlogy, [a(0.0, 0, 1), a(0.0, 2, 0)], [a(0, 0, -inf), a(0, np.log(2), -inf), a(nan, 0, inf)]),
    "arctan2 at the origin": (F.arctan2, [f32(0.0, 1), f32(0.0, 0)], [a(0, np.pi / 2), a(0, 0), a(-0.0, -1)]),
    "hypot at the origin": (F.hypot, [a(0.0, 3), a(0.0, 4)], [a(0, 5), a(nan, 0.6), a(nan, 0.8)]),
    "copysign": (F.copysign, [a(1.0, -2, 0, 3), a(-1.0, 2, -1, 0.5)],
                 [a(-1, 2, -0.0, 3), a(-1, -1, 0, 1), a(0, 0, 0, 0)]),
    "fmod and remainder": (lambda a_, b: F.fmod(a_, b) + F.remainder(a_, b), [a(5.0, -5, 5, -5), a(3.0, 3, -3, -3)],
                           [a(4, -1, 1, -4), a(2, 2, 2, 2), a(-2, 3, 3, -2)]),
    "logit with eps": (lambda x: F.logit(x, eps=0.1), [a(0.05, 0.1, 0.95)],
                       [a(np.log(1 / 9), np.log(1 / 9), np.log(9)), a(0, 100 / 9, 0)]),
    "lgamma at poles": (F.lgamma, [a(0.0, -1, 1)], [a(inf, inf, 0), a(-inf, nan, -EULER)]),
    "digamma at poles": (F.digamma, [a(0.0, -1, 1)], [a(-inf, nan, -EULER), a(inf, inf, np.pi ** 2 / 6)]),
    "erfinv at ±1": (F.erfinv, [a(1.0, -1, 0)], [a(inf, -inf, 0), a(inf, inf, np.sqrt(np.pi) / 2)]),
    "cumprod with zeros": (lambda x: F.cumprod(x) * a(1.0, 2, 3, 4), [a(2.0, 0, 3, 0)],
                           [a(2, 0, 0, 0), a(1, 22, 0, 0)]),
    "heaviside at 0": (F.heaviside, [a(-1.0, 0, 2), a(0.5, 0.3, 0.7)], [a(0, 0.3, 1), a(0, 0, 0), a(0, 1, 0)]),
    "sinc at 0": (F.sinc, [a(0.0, 1)], [a(1, np.sinc(1.0)), a(0, -1)]),
    "xlog1py at x = 0": (F.xlog1py, [a(0.0, 0, 2), a(-1.0, 0.5, -0.5)],
                         [a(0, 0, 2 * np.log(0.5)), a(0, np.log1p(0.5), np.log(0.5)), a(0, 0, 4)]),
    "kthvalue ties": (lambda x: F.kthvalue(x, 2)[0], [a(3.0, 1, 1, 2)], [1.0, a(0, 0, 1, 0)]),
    "nanmedian with NaN": (F.nanmedian, [a(3.0, 1, nan, 2)], [2.0, a(0, 0, 0, 1)]),
    "mode ties": (lambda x: F.mode(x)[0], [a(3.0, 1, 3, 1)], [1.0, a(0, 0, 0, 1)]),
    "quantile at a sample": (lambda x: F.quantile(x, a(0.5, 1 / 3)), [a(1.0, 2, 3, 4)], [a(2.5, 2), a(0, 1.5, 0.5, 0)]),
    "max_unpool repeated index": (lambda p: F.max_unpool(p, np.array([[[1, 1, 4]]]), 2),
                                  [a(1.0, 2, 3).reshape(1, 1, 3)],
                                  [a(0, 2, 0, 0, 3, 0).reshape(1, 1, 6), a(0, 1, 1).reshape(1, 1, 3)]),
    "eigvalsh at a repeated eigenvalue": (F.eigvalsh, [np.eye(2)], [a(1, 1), np.eye(2)]),
    "eigh vectors at a repeated eigenvalue": (lambda x: F.eigh(x)[1] * a(1.0, 2, 3, 4).reshape(2, 2), [np.eye(2)],
                                              [np.diag([1.0, 4]), np.full((2, 2), nan)]),
    "svdvals at a repeated singular value": (F.svdvals, [np.array([[0.0, 1], [1, 0]])],
                                             [a(1, 1), np.array([[0.0, 1], [1, 0]])]),
    "pinv at rank deficiency": (F.pinv, [np.diag([2.0, 0])], [np.diag([0.5, 0]), np.array([[-0.25, 0.25], [0.25, 0]])]),
    "gaussian_nll_loss with var below eps": (
        lambda v: F.gaussian_nll_loss(a(1.0, 1), a(0.0, 0), v, reduction="sum"), [a(1e-9, 2)],
        [0.5 * (np.log(1e-6) + 1e6) + 0.5 * (np.log(2) + 0.5), a(0.5 / 1e-6 - 0.5 / 1e-12, 0.125)]),
}


@pytest.mark.parametrize("name", sorted(CONVENTIONS))
def test_convention(name):
    fn, inputs, expected = CONVENTIONS[name]
    check_values(value_and_grad(fn), inputs, expected, rtol=1e-6 if inputs[0].dtype == np.float32 else 1e-12)
