"""Every 1-D pooling geometry of a small grid that ONNX Runtime runs (input size, kernel, stride,
padding, dilation, ceil_mode; MaxPool, AveragePool with and without the padding counted, LpPool):
gcompile's import computes ONNX Runtime's values. Hand-picked cases (test_translators_vs_reference)
missed a window reaching past the padded input under ceil_mode, which the importer refused; a grid
over the attributes finds such a class, not one shape."""
import itertools

import numpy as np
import pytest

import gcompile as gc
from gcompile.frontend.trace import trace
from gcompile.ir.evaluate import evaluate

from .helpers import ort_run, single_node

GRID = list(itertools.product(range(1, 5), range(1, 6), (1, 2, 3), ((0, 0), (1, 0), (0, 2)), (1, 2), (0, 1)))
OPS = {"MaxPool": {}, "AveragePool": {"count_include_pad": 0}, "AveragePool counting pads": {"count_include_pad": 1},
       "LpPool": {"p": 2}}


def _windows(size, kernel, stride, pads, dilation, ceil) -> list[list[int]]:
    """The input positions each output window reads by ONNX's rule (padding's positions left out)."""
    span = size + sum(pads) - dilation * (kernel - 1) - 1
    if span < (1 - stride if ceil else 0):
        return []
    count = (-(-span // stride) if ceil else span // stride) + 1
    if ceil and (count - 1) * stride >= size + pads[0]:      # the last window starts in the end padding
        count -= 1
    return [[p for t in range(kernel) if 0 <= (p := o * stride - pads[0] + t * dilation) < size] for o in range(count)]


@pytest.mark.parametrize("op", list(OPS))
def test_every_geometry_onnxruntime_runs_imports_to_its_values(op):
    rng = np.random.default_rng(0)
    checked = 0
    for size, kernel, stride, pads, dilation, ceil in GRID:
        windows = _windows(size, kernel, stride, pads, dilation, ceil)
        if not windows or not all(windows):
            # no window by ONNX's rule (ONNX Runtime truncates toward zero and makes one), or a window of
            # padding alone (ONNX leaves it open: ONNX Runtime gives 0 or float32's lowest, onnx's reference NaN)
            continue
        x = rng.permutation(np.arange(1, 2 * size + 1, dtype=np.float32)).reshape(1, 2, size)   # no ties
        proto, _ = single_node(op.split()[0], [("x", x)], kernel_shape=[kernel], strides=[stride], pads=list(pads),
                            dilations=[dilation], ceil_mode=ceil, **OPS[op])
        try:
            want = ort_run(proto, {"x": x})[0]
        except Exception:          # a geometry ONNX Runtime refuses (padding as wide as the kernel)
            continue
        f = gc.load_onnx(proto)
        got = evaluate(trace(f, [x]).graph, [x])[0]
        geometry = dict(size=size, kernel=kernel, stride=stride, pads=pads, dilation=dilation, ceil=ceil)
        assert got.shape == want.shape, geometry
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=str(geometry))
        checked += 1
    assert checked > len(GRID) // 3, checked        # a good part of the grid runs
