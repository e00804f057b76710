"""What `gcompile build` makes and the CLI reads back: describing saved ONNX artifacts for the manifest
and `inspect`."""
