"""Neural-network functions: softmax family, losses, normalisation, dropout."""
from __future__ import annotations

__all__: list[str] = []
