"""Training steps as standard ONNX models: the optimizers (optim), tracing a whole step into one
model (step), the names such a model carries (layout) and the loop that runs it with the
parameters kept on the device (trainer). Builds on gcompile.runtime, which never imports it."""
from . import optim
from .layout import StepLayout
from .step import TrainStep, export_train_step
from .trainer import Trainer

__all__ = ["StepLayout", "TrainStep", "Trainer", "export_train_step", "optim"]
