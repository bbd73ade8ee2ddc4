"""Trained checkpoints in the lab: HF folders read into simlab's layout (docs/checkpoints.md).

load(path) -> Checkpoint          a HuggingFace checkpoint folder (or HF cache snapshot),
                                  no download, no torch needed (safetensors)
ARCHITECTURES                     model_type -> how its tensors map onto simlab's blocks
load_series(folder)               every checkpoint folder inside one (training steps)
"""

from simlab.checkpoints.architectures import ARCHITECTURES, Architecture, register_architecture
from simlab.checkpoints.checkpoint import Checkpoint, load, load_series

__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "Checkpoint",
    "load",
    "load_series",
    "register_architecture",
]
