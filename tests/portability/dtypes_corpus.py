"""The dtypes ONNX Runtime has few kernels for and quantization, as a `gcompile build` model file
(tests/portability/test_dtypes_portability.py runs it): a layer in bfloat16, float8 and int4 round
trips, a quantized layer's gradients in its input and its weights' scale, and unsigned and int64
values past 2**31 and 2**53 made at run time (from the 0/1 inputs `gcompile build --check` feeds)
through sums, products and orderings."""
import numpy as np

import gcompile as gc
import gcompile.functions as F

rng = np.random.default_rng(45)
W_Q = rng.integers(-128, 128, (4, 3)).astype(np.int8)
W_ZERO = np.array([3, -2, 0], np.int8)


@gc.export(x=gc.spec(("batch", 4)), counts=gc.spec(("batch", 4), "uint32"), flags=gc.spec(("batch", 4), "int64"),
           scale=gc.spec((3,)))
def dtypes_and_quantization(x, counts, flags, scale):
    h = F.cast(F.tanh(F.cast(x, "bfloat16") * 1.5), np.float32)
    f8 = F.cast(F.cast(x * 100, "float8_e4m3fn"), np.float32)
    i4 = F.cast(F.cast(F.round(x * 3), "int4"), np.float32)
    w = F.dequantize_linear(W_Q, scale * np.float32(0.01), W_ZERO, axis=1)
    y = F.tanh(F.fake_quantize(x, np.float32(0.05), np.uint8(128)) @ w)
    loss = F.sum(y * y)
    gx, gscale = gc.grad(loss, [x, scale])
    u = counts * np.uint32(1431655765) + np.uint32(2147483655)          # past 2**31, wrapping past 2**32
    big = flags * np.int64(2 ** 53 + 1) + np.int64(5 * 2 ** 32 + 3)      # sharing their high 32 bits, past 2**53
    return {"h": h, "f8": f8, "i4": i4, "loss": loss, "gx": gx, "gscale": gscale,
            "u_sum": F.sum(u, 1), "u_max": F.max(u, 1), "u_min": F.min(u, 0), "u_prod": F.prod(u, 1),
            "u16": F.cumsum(F.cast(u, "uint16"), 1), "big_max": F.max(big - flags * 7, 1),
            "big_sum": F.sum(big), "big_prod": F.prod(big, 0), "big_sign": F.sign(big - np.int64(5 * 2 ** 32 + 4)),
            "big_clip": F.clip(big, 5 * 2 ** 32 + 4, 2 ** 53 + 5 * 2 ** 32)}
