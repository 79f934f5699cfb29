"""Whether a draft model can serve a verifier: a NAT drafter (GAD) or a little
autoregressive model over the verifier's encoder (BiLD), speaking its vocabulary. What
Translator and the CLI check before any engine is built (api.load_checked)."""
from __future__ import annotations

from pyfastdec.model_dir import ModelDir, ModelDirError, check_shared_encoder
from pyfastdec.text import Tokenizer


def is_little(drafter: ModelDir) -> bool:
    """A draft model that decodes autoregressively over the verifier's encoder: BiLD's
    little model (a NAT drafter is GAD's)."""
    return drafter.config.arch == "transformer" and drafter.config.encoder_shared is not None


def check_drafter(verifier: ModelDir, drafter: ModelDir) -> None:
    """The draft model must be a NAT drafter (GAD) or a little autoregressive model that
    reads the verifier's encoder (BiLD), speaking the verifier's vocabulary: same size,
    same special ids and the same sentencepiece pieces (a byte-identical spm.model, or
    one with identical pieces in identical order). One without an encoder must have been
    trained over this verifier's (model_dir.check_shared_encoder)."""
    if drafter.config.arch != "nat-drafter" and not is_little(drafter):
        raise ModelDirError(f"{drafter.path}: arch: {drafter.config.arch!r} (expected \"nat-drafter\" for a GAD "
                            f"drafter, or \"transformer\" with encoder.shared for a BiLD little model)")
    check_shared_encoder(verifier, drafter, "drafter" if drafter.config.arch == "nat-drafter" else "little model")
    if drafter.config.vocab_size != verifier.config.vocab_size:
        raise ModelDirError(f"{drafter.path}: vocab_size: {drafter.config.vocab_size} differs from the "
                            f"verifier's {verifier.config.vocab_size} ({verifier.path}); a drafter must share "
                            f"the verifier's vocabulary")
    if drafter.config.tokens != verifier.config.tokens:
        raise ModelDirError(f"{drafter.path}: tokens: {drafter.config.tokens} differ from the verifier's "
                            f"{verifier.config.tokens} ({verifier.path})")
    if drafter.config.tokenizer != "spm" or verifier.config.tokenizer != "spm":
        # Foreign vocabularies (tokenizer "marian"): the very same files, nothing looser.
        for name, path in verifier.tokenizer_files.items():
            if name not in drafter.tokenizer_files or drafter.read_bytes(name) != verifier.read_bytes(name):
                raise ModelDirError(f"{drafter.path}: {name}: differs from the verifier's {path} (expected the "
                                    f"verifier's tokenizer {verifier.config.tokenizer!r} files, byte-identical)")
        return
    if drafter.read_bytes(drafter.spm_path.name) == verifier.read_bytes(verifier.spm_path.name):
        return
    mine, theirs = Tokenizer(drafter.spm_path).pieces(), Tokenizer(verifier.spm_path).pieces()
    for i, (a, b) in enumerate(zip(mine, theirs)):
        if a != b:
            raise ModelDirError(f"{drafter.spm_path}: piece {i} is {a!r} but the verifier's is {b!r} "
                                f"({verifier.spm_path}); a drafter must share the verifier's vocabulary")
