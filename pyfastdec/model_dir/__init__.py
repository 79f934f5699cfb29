"""The pyfastdec model directory (export/FORMAT.md, version 1), one module per job:

- layout.py           the file names, and which tokenizer brings which files
- config_schema.py    what config.json may hold; ModelConfig
- config_parser.py    read_config: config.json validated into a ModelConfig
- tensor_schema.py    the tensors model.safetensors must hold for a config, and their bounds
- tokenizer_files.py  spm.model, or Marian's source.spm / target.spm / vocab.json
- checksums.py        config.json "checksum": digests, content checks, what writers record
- loader.py           ModelDir.load: a whole directory validated, weights memory-mapped
                      (or viewed in the bytes a caller read already)
- model_files.py      a directory's files in memory with one digest (what a Ray job ships);
                      ReadOnce: read once, validated from those bytes
- shared_encoder.py   encoder digests, and models that read another model's encoder
- heads_verifier.py   proposal heads and the model they were trained for (heads.verifier)
- errors.py           ModelDirError and the wording of refusals

Only numpy, sentencepiece and the standard library are used (pyfastdec's run-time
dependencies); the training-side writer lives in pyfastdec/training/writer.py. This module only
re-exports the names the rest of the tree imports from the package.
"""
from pyfastdec.model_dir.checksums import (CHECKSUM_CONFIG, check_shortlist_content, checksum_keys, config_digest,
                                           file_digest)
from pyfastdec.model_dir.config_parser import load_config_json, parse_config, read_config
from pyfastdec.model_dir.config_schema import (MAX_ACTIVATION_SCALE, MAX_EDIT_MARGIN, QUANT_ACTIVATIONS,
                                               QUANT_DYNAMIC_ACTIVATIONS, QUANT_EMBEDDING, QUANT_WEIGHT_SCALE,
                                               QUANT_WEIGHTS, ModelConfig, engine_edit_margin, is_edit_margin)
from pyfastdec.model_dir.errors import ModelDirError
from pyfastdec.model_dir.layout import (CONFIG_FILE, SHORTLIST_FILE, SOURCE_SPM_FILE, TARGET_SPM_FILE,
                                        TOKENIZER_FILES, VOCAB_FILE, WEIGHTS_FILE)
from pyfastdec.model_dir.loader import ModelDir
from pyfastdec.model_dir.shared_encoder import check_shared_encoder, encoder_digest
from pyfastdec.model_dir.tensor_schema import EMBED_SCALE, expected_tensors, quantized_linears
from pyfastdec.model_dir.tokenizer_files import check_marian_vocab, check_tokenizer, read_vocab_json

__all__ = [
    "CHECKSUM_CONFIG", "CONFIG_FILE", "EMBED_SCALE", "MAX_ACTIVATION_SCALE", "MAX_EDIT_MARGIN", "QUANT_ACTIVATIONS",
    "QUANT_DYNAMIC_ACTIVATIONS", "QUANT_EMBEDDING", "QUANT_WEIGHTS", "QUANT_WEIGHT_SCALE", "SHORTLIST_FILE",
    "SOURCE_SPM_FILE", "TARGET_SPM_FILE", "TOKENIZER_FILES", "VOCAB_FILE", "WEIGHTS_FILE", "ModelConfig", "ModelDir",
    "ModelDirError", "check_marian_vocab", "check_shared_encoder", "check_shortlist_content", "check_tokenizer",
    "checksum_keys", "config_digest", "encoder_digest", "engine_edit_margin", "expected_tensors", "file_digest",
    "is_edit_margin", "load_config_json", "parse_config", "quantized_linears", "read_config", "read_vocab_json",
]
