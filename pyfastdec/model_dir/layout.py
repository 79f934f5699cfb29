"""The files of a model directory (export/FORMAT.md): their names, and which tokenizer
brings which files. Model directories are flat: every file sits at the top level.
"""
from __future__ import annotations

CONFIG_FILE, WEIGHTS_FILE, SPM_FILE = "config.json", "model.safetensors", "spm.model"
# The vocabulary: one joint spm.model whose ids are the model's, or Marian's two
# sentencepiece models (source, target) over one vocab.json (piece -> model id).
TOKENIZERS = ("spm", "marian")
SOURCE_SPM_FILE, TARGET_SPM_FILE, VOCAB_FILE = "source.spm", "target.spm", "vocab.json"
TOKENIZER_FILES = {"spm": (SPM_FILE,), "marian": (SOURCE_SPM_FILE, TARGET_SPM_FILE, VOCAB_FILE)}

# The lexical shortlist is optional, and so is its key; but a checksummed directory that
# has one must list it (check_shortlist_content): a shortlist.bin of another model with the
# same vocabulary size loads and silently changes every output.
SHORTLIST_FILE = "shortlist.bin"
