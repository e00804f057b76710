"""What `gcompile build` makes and the CLI reads back: marking functions for the build (marks),
building them into ONNX files and a manifest (build), describing saved artifacts for the manifest
and `inspect` (describe) and drawing them (viz). Builds on runtime and training."""
