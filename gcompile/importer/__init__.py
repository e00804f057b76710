"""The ONNX importer: gc.load_onnx, an existing ONNX model as a traceable, differentiable callable.

load.py reads the model (OnnxModel, gc.load_onnx) once validate.py's checks on what an untrusted
file may declare pass; inline.py runs its graph into the current trace node by node, looking each
op up in table.py's TRANSLATORS (and computing at import time only values of up to 4,096
elements); translators/ fills that table, one function per ONNX op written with gcompile ops;
grad.py is `gcompile grad` (an ONNX model in, its gradients as a standard ONNX model out).
"""
from . import translators  # noqa: F401  (fills table.TRANSLATORS before any model is inlined)
