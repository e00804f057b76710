"""Which outputs of a model may be written into the buffers of the inputs they replace.

A training step reads the parameters and optimizer state and returns their new values
("w" -> "w.new"). Written into buffers of their own, the new values double what a Trainer
holds: for Adam, three copies of the weights become six (docs/guide/training.md measures it).
ONNX Runtime writes an output bound through IO binding at the node that produces it, straight
into the bound buffer, and never writes a graph input's buffer itself. So binding "w.new" to the
buffer of "w" updates w in place at that node, and every node after it that reads w, or a view
of w (a Reshape's output shares its input's buffer), reads the new value. That is right only
where the session runs the nodes in a known order (providers.run_order) and, in that order:

- every node that reads w or a view of w comes before the writer of "w.new";
- the writer reads w, if at all, as an elementwise op of w's own shape (each element is read
  before the same element is written, and by nothing else), and no other view of w;
- the writer comes after every node that could fail on the data it is given (an index out of
  range, a shape a reshape cannot take): a step that fails, fails before anything was written,
  and leaves every value as it was. After those, only elementwise arithmetic and reductions
  remain, which cannot fail.

The others keep a buffer of their own (the Trainer swaps those after each step).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

__all__ = ["in_place_outputs"]

# ops whose output may share its input's buffer in ONNX Runtime
VIEWS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout"})
# elementwise arithmetic, comparisons and reductions: nothing in them can fail on the values given
SAFE = frozenset({"Abs", "Add", "And", "Cast", "Clip", "Div", "Equal", "Exp", "Greater", "GreaterOrEqual",
                  "Identity", "IsInf", "IsNaN", "Less", "LessOrEqual", "Log", "Max", "Min", "Mul", "Neg", "Not", "Or",
                  "Pow", "Reciprocal", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean", "Sign", "Sqrt",
                  "Sub", "Sum", "Where"})
# ops that read a w of the output's shape element by element: safe writers of "w.new" that read w
# (an Identity copies, onto itself here)
ELEMENTWISE = SAFE - {"Identity", "ReduceMax", "ReduceMin", "ReduceSum", "ReduceMean"}


def in_place_outputs(nodes: Sequence, replaces: Mapping[str, str]) -> set[str]:
    """The inputs of `replaces` ({input: the output that replaces it, of the same shape}) whose
    output may be written into the input's buffer, for a session that runs the onnx NodeProtos
    `nodes` in this order (module docstring)."""
    position: dict[str, int] = {}
    readers: dict[str, list[int]] = defaultdict(list)
    for i, node in enumerate(nodes):
        for name in node.output:
            position[name] = i
        for name in node.input:
            if name:
                readers[name].append(i)
    fence = max((i for i, node in enumerate(nodes) if node.op_type not in SAFE), default=-1)
    safe = set()
    for value, new in replaces.items():
        writer = position.get(new)
        if writer is None or writer <= fence:
            continue
        views, stack = {value}, [value]
        while stack:
            for i in readers[stack.pop()]:
                if nodes[i].op_type in VIEWS:
                    fresh = [o for o in nodes[i].output if o and o not in views]
                    views.update(fresh)
                    stack.extend(fresh)
        node = nodes[writer]
        last_reader = max((i for v in views for i in readers[v] if i != writer), default=-1)
        reads = [v for v in node.input if v in views]
        if last_reader < writer and all(v == value for v in reads) and (not reads or node.op_type in ELEMENTWISE):
            safe.add(value)
    return safe
