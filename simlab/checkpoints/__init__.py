"""Trained checkpoints in the lab, the weight source between core and the engine: HF folders
read into simlab's layout (docs/checkpoints.md).

load(path) -> Checkpoint          a HuggingFace checkpoint folder (or HF cache snapshot),
                                  a llama.cpp .gguf file (gguf_file), or an installed
                                  model's name (models.MODELS: `simlab models`); no
                                  download, no torch needed; every file read once
Checkpoint.at(layers) -> Weights  what Lab(weights=...) runs
source.resolve(spec, block)       a [checkpoint] table -> (spec, BlockSpec, Weights)
ARCHITECTURES                     model_type -> how its tensors map onto simlab's blocks
load_series(folder)               every checkpoint folder inside one (training steps)
simlab.checkpoints.series         moved to simlab.studies.series (an alias that warns,
                                  simlab.aliases)
Importing the package registers the input kinds of trained layers ("tokens",
simlab.checkpoints.inputs) in simlab.core.inputs.INPUTS.
"""

from simlab import aliases
from simlab.checkpoints import inputs as _inputs  # noqa: F401  (registers "tokens")
from simlab.checkpoints.architectures import ARCHITECTURES, Architecture, register_architecture
from simlab.checkpoints.checkpoint import Checkpoint, Weights, load, load_series
from simlab.checkpoints.source import CheckpointSpec, checkpoint_from_dict, resolve

__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "Checkpoint",
    "CheckpointSpec",
    "Weights",
    "checkpoint_from_dict",
    "load",
    "load_series",
    "register_architecture",
    "resolve",
]

# moved to simlab.studies.series: the old path works, with a DeprecationWarning, for a release
aliases.moved_module("simlab.checkpoints.series", "simlab.studies.series")
