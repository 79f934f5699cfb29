"""Proposal heads and the model they were trained for: config.json heads.verifier.

Heads are trained on one model's final decoder states, against its own greedy outputs
(`fastdec train-heads`). Next to another model of the same shape they load and stay
lossless (blockwise verifies every proposal), but propose the other model's tokens and
are rejected nearly always: a slowdown that nothing would report. So the trainer records
in heads.verifier the digest of the network the heads read, and a directory whose
network differs from it is refused at load. Without the field (directories written
before it) nothing is checked.
"""
from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING

from pyfastdec.model_dir.checksums import tensors_digest
from pyfastdec.model_dir.errors import ModelDirError
from pyfastdec.model_dir.layout import CONFIG_FILE

if TYPE_CHECKING:  # the loader calls check_heads_verifier; the class is only a type here
    from pyfastdec.model_dir.loader import ModelDir

HEADS_PREFIX = "heads."
# Config fields that do not change the states the heads read or the tokens greedy picks:
# the heads themselves, the file checksums, decoding defaults, calibration notes, what
# the model is for.
_NOT_THE_NETWORK = ("heads", "checksum", "edit_margin", "bild", "description", "task")


def verifier_digest(model: "ModelDir") -> str:
    """"sha256:..." naming the network proposal heads read: every tensor but heads.*, the
    config fields that shape it and the int8 input scales of its linears (not those of the
    heads, nor how they were calibrated). Retraining, pruning or re-quantising the model
    changes it; adding, retraining or removing heads, a shortlist or decoding defaults
    does not."""
    config = model.config
    described = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
                 if f.name not in _NOT_THE_NETWORK}
    described = json.loads(json.dumps(described, default=_plain, sort_keys=True))
    quant = described.get("quantization")
    if quant is not None:
        quant.pop("calibration", None)
        quant["activation_scales"] = {name: m for name, m in quant["activation_scales"].items()
                                      if not name.startswith(HEADS_PREFIX)}
    return tensors_digest(described, model.tensors, lambda name: not name.startswith(HEADS_PREFIX))


def _plain(value):
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    raise TypeError(f"verifier_digest: cannot describe {type(value).__name__}")


def check_heads_verifier(model: "ModelDir") -> None:
    """Refuses heads whose config.json heads.verifier is not this directory's network."""
    heads = model.config.heads
    if heads is None or heads.verifier is None:
        return
    actual = verifier_digest(model)
    if heads.verifier != actual:
        raise ModelDirError(f"{model.path / CONFIG_FILE}: heads.verifier: {heads.verifier} is not this model's "
                            f"network ({actual}): the proposal heads were trained for another model; train "
                            f"heads for this one with fastdec train-heads")
