"""The ONNX importer: gc.load_onnx, an existing ONNX model as a traceable, differentiable callable."""
