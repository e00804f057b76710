"""Failures that remain, each with its cause: the tests expect exactly these (the failure's message
must contain `match`) and fail when one no longer happens, so this list and docs/targets.md
stay true. Fixing a cause means deleting its entry here and its line in docs/targets.md.
"""
from __future__ import annotations

from dataclasses import dataclass

# F.mean's gradient (ops/reduce.py) divides the cotangent by the element count after reshaping it
# to keepdims shape, so its Div reads a constant 1 of shape [1], [1, 1], ...
_MEAN_GRADIENT = frozenset({
    "gradient_penalty", "lstm_grad", "scan_rnn_hvp", "cnn_bn_adam", "transformer_grad", "conv_penalty",
    "imported_grad", "force_matching", "cnn.loss_and_grads", "ctc_lstm.ctc_train_step", "finetune_onnx.finetune",
    "hvp.hvp", "mlp.loss_and_grads", "nn_cnn.train_step", "pinn.pinn_loss_and_grads", "wgan_gp.wgan_gp_penalty"})
# Max pooling's gradient (ops/conv.py, pool_scatter) is a MaxUnpool.
_MAX_POOL_GRADIENT = frozenset({"cnn_bn_adam", "conv_penalty", "imported_grad", "cnn.loss_and_grads",
                                "nn_cnn.train_step"})


@dataclass(frozen=True)
class Known:
    subject: str          # a runtime (test_portability) or a construct (test_constructs)
    cases: frozenset[str]
    match: str            # in the failure's message
    why: str


RUNTIME_FAILURES = [
    Known("onnxruntime-web", frozenset({"gradient_penalty", "lstm_grad", "scan_rnn_hvp", "transformer_grad",
                                        "force_matching", "pinn.pinn_loss_and_grads", "wgan_gp.wgan_gp_penalty"}),
          "Mismatch between number of inferred and declared dimensions",
          "ONNX Runtime's DivMulFusion drops the broadcast axes of the [1]-shaped 1 in F.mean's gradient where a Mul "
          "follows the Div (construct unit-numerator); onnxruntime-web then refuses the model"),
    Known("openvino", _MAX_POOL_GRADIENT, "No conversion rule found for operations: MaxUnpool",
          "OpenVINO's ONNX front end has no MaxUnpool, which max pooling's gradient lowers to (construct max-unpool)"),
    Known("onnx-reference", frozenset({"cnn.loss_and_grads"}), "loss: infinities differ",
          "onnx's ReferenceEvaluator computes LogSoftmax as log(Softmax(x)), which is -inf where the logits spread "
          "more than about 104 (float32's exp underflows; the operator's own function body subtracts the maximum "
          "first): the example's untrained CNN gives logits 2,500 apart on --check's random images"),
]

CONSTRUCT_FAILURES = [
    Known("unit-numerator", _MEAN_GRADIENT, "1 of shape [", "F.mean's gradient (ops/reduce.py) reshapes the "
          "cotangent to keepdims shape before dividing it by the count; dividing first makes the 1 a scalar"),
    Known("max-unpool", _MAX_POOL_GRADIENT, "pool_scatter", "max pooling's gradient (ops/conv.py) lowers to MaxUnpool"),
]


def expected(table: list[Known], subject: str, case: str) -> Known | None:
    """The entry saying how `case` fails for `subject`, if one does."""
    return next((k for k in table if k.subject == subject and case in k.cases), None)
