"""How much ONNX Runtime's CPU convolution loses when its weights are a graph input, as every
training step's are, against the same Conv with the weights stored in the model.

    python tools/conv_weights.py              # the shapes below, two threads
    python tools/conv_weights.py --threads 1

ONNX Runtime's fast convolution kernels (the NCHWc layout, a depthwise kernel among them) are
chosen by a graph rewrite that reorders the weights once, when the session is made, so it only
applies to weights stored in the model. A step's weights arrive with each call and take the
general path (an im2col and a product per group): a depthwise 7x7 convolution, one channel per
group, runs as one tiny product per channel. docs/performance.md ("What bounds the rest") quotes
this tool's figures; it times nothing of gcompile's own.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (batch, channels, size, kernel, groups): ConvNeXt-T's depthwise 7x7 convolutions at its first
# and third stages, ResNet-50's 3x3 convolutions at its first and third stages.
SHAPES = [(8, 96, 56, 7, 96), (8, 384, 14, 7, 384), (8, 64, 56, 3, 1), (8, 256, 14, 3, 1)]


def conv_weights(shape) -> np.ndarray:
    _, channels, _, kernel, groups = shape
    weights = np.random.default_rng(0).standard_normal((channels, channels // groups, kernel, kernel))
    return (weights * 0.05).astype(np.float32)


def conv_model(shape, stored: bool) -> bytes:
    """A model of one Conv of `shape`, its weights an initializer (`stored`) or a graph input."""
    from onnx import TensorProto, helper, numpy_helper
    batch, channels, size, kernel, groups = shape
    weights = conv_weights(shape)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, channels, size, size])]
    if not stored:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(weights.shape)))
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[kernel // 2] * 4, group=groups)
    graph = helper.make_graph([node], "conv", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weights, "w")] if stored else [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


def main() -> None:
    import onnxruntime as ort

    from tools.bench.harness import median_ms
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    print(f"onnxruntime {ort.__version__}, {args.threads} thread(s), median of {args.runs} calls of each, "
          "the two alternating in blocks")
    print("batch x channels x size², kernel, groups | weights stored | weights an input | ratio")
    for shape in SHAPES:
        batch, channels, size, kernel, groups = shape
        x = np.random.default_rng(1).standard_normal((batch, channels, size, size)).astype(np.float32)
        w = conv_weights(shape)
        calls = {}
        for kind, feeds in (("stored", {"x": x}), ("given", {"x": x, "w": w})):
            session = ort.InferenceSession(conv_model(shape, kind == "stored"), options,
                                           providers=["CPUExecutionProvider"])
            calls[kind] = lambda session=session, feeds=feeds: session.run(None, feeds)
        ms = median_ms(calls, args.runs)
        stored, given = ms["stored"], ms["given"]
        print(f"{batch} x {channels} x {size}², {kernel}x{kernel}, {groups} | {stored:.2f} ms | {given:.2f} ms | "
              f"{given / stored:.1f}")


if __name__ == "__main__":
    main()
