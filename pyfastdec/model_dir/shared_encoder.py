"""Models that read another model's encoder (config.json encoder.shared): the digest
that names what an encoder computes, and the check that a drafter or a BiLD little model
is paired with the host whose encoder it was trained over.
"""
from __future__ import annotations

import dataclasses
import os

from pyfastdec.model_dir.checksums import tensors_digest
from pyfastdec.model_dir.errors import ModelDirError
from pyfastdec.model_dir.layout import CONFIG_FILE
from pyfastdec.model_dir.loader import ModelDir
from pyfastdec.model_dir.tensor_schema import EMBED_SCALE, EMBED_WEIGHT


# Config fields that change what an encoder computes from the same tensors.
_ENCODER_FIELDS = ("d_model", "head_dim", "norm", "activation", "layer_norm_eps", "positions", "max_source_len")
# Tensors outside encoder.* that it computes from: the token embedding feeding its first
# layer (tied with the decoder's input and output layer, so a host retrained or quantised
# on that side alone changes the encoder output too). Named, so an embedding that differs
# is refused by the digest itself, not by whatever else happens to differ with it.
ENCODER_INPUT_TENSORS = (EMBED_WEIGHT, EMBED_SCALE)


def encoder_digest(model: "ModelDir | str | os.PathLike") -> str:
    """"sha256:..." naming what a model's encoder computes: its tensors (encoder.* and
    ENCODER_INPUT_TENSORS, the embedding that feeds it), the int8 input scales of its linears and the config
    fields that shape it. A shared-encoder model (config.json encoder.shared) records
    its host's, and is refused next to a model whose encoder differs in any of these."""
    model = model if isinstance(model, ModelDir) else ModelDir.load(model)
    config = model.config
    if config.encoder_shared is not None:
        raise ModelDirError(f"{model.path / CONFIG_FILE}: encoder.shared: this model has no encoder of its own "
                            f"(it reads another model's), so no model can share it")
    known = model.digests.get("encoder")
    if known is not None:  # this load's, computed already (ModelDir.digests)
        return known
    quant = config.quantization
    described = {name: getattr(config, name) for name in _ENCODER_FIELDS}
    described["layers"] = [dataclasses.astuple(layer) for layer in config.encoder_layers]
    described["scales"] = sorted((name, scale) for name, scale in (quant.activation_scales if quant else {}).items()
                                 if name.startswith("encoder."))
    digest = tensors_digest(described, model.tensors,
                            lambda name: name.startswith("encoder.") or name in ENCODER_INPUT_TENSORS)
    model.digests["encoder"] = digest
    return digest


def check_shared_encoder(host: ModelDir, model: ModelDir, role: str) -> None:
    """`model` (a drafter or BiLD little model, `role` names it) must read `host`'s encoder
    output when it has no encoder of its own: same d_model and vocabulary, and its
    config.json encoder.shared the digest of host's encoder. A model with its own encoder
    passes (it encodes the sources itself)."""
    where = model.path / CONFIG_FILE
    shared = model.config.encoder_shared
    if shared is None:
        return
    for field in ("d_model", "vocab_size"):
        mine, theirs = getattr(model.config, field), getattr(host.config, field)
        if mine != theirs:
            raise ModelDirError(f"{where}: {field}: {mine} differs from {theirs} of the model whose encoder this "
                                f"{role} reads ({host.path})")
    actual = encoder_digest(host)
    if shared != actual:
        raise ModelDirError(f"{where}: encoder.shared: {shared} is not the encoder of {host.path} ({actual}); "
                            f"this {role} was trained over another model's encoder (export.train_shared)")
