"""Beyond one machine: data-parallel training and batch evaluation on Ray.

- `export_split_step` exports a training step as a gradient model and an update model
  (gcompile.training.split); `DistributedTrainer` runs it on N Ray workers with the API of
  gcompile.training.Trainer, averaging gradients across workers each step.
- `map_model` maps a saved model (forward, gradient, HVP, ...) over a Parquet or .npy dataset
  with Ray Data, one onnxruntime session per worker.

Ray is an optional dependency (pip install 'gcompile[distributed]'): importing this package does
not import it, and `import gcompile` never imports this package.
"""
from ..training.split import SplitStep, export_split_step
from .cluster import WorkerError
from .dataset import map_model, read_shards
from .trainer import DistributedTrainer

__all__ = ["DistributedTrainer", "SplitStep", "WorkerError", "export_split_step", "map_model", "read_shards"]
