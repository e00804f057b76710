"""The importer's translators: one function per ONNX op, written with gcompile ops."""
