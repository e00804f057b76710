"""The graph IR: typed values, symbolic dims, nodes and the reference evaluator."""
from .dims import Dim, Shape
from .graph import Graph, Node, TensorType, ValueRef, tensor_type

__all__ = ["Dim", "Shape", "Graph", "Node", "TensorType", "ValueRef", "tensor_type"]
