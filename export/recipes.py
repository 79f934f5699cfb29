"""Training recipes: model shape + data + hyperparameters, by name.

Sizes are for this project's CPU-only training on Multi30k (29k sentence pairs): the data
set is small, so dropout is high, and the wall-clock budget is short (~20 epochs, ~2-3k
updates), so warm-up is a few hundred steps rather than the usual 4000.

"bf16": autocast only pays off on CPUs with AMX. On the avx512_core_bf16 VM used here
(no AMX) a teacher step measured 2.2x slower in bf16 than fp32 (984 vs 2125 tok/s).
"""
from __future__ import annotations

from .gec_noise import gec_synth_dir
from .general_en_de import general_dir
from .uagec import corpus_dir

RECIPES: dict[str, dict] = {
    # 6+3 pre-norm Transformer, d256, joint 8k vocabulary: ~9.9M parameters. Averages only
    # the last 3 checkpoints: a ~10-epoch CPU run is still improving fast at the end.
    "teacher-en-de": {
        "src": "en", "tgt": "de", "corpus": "multi30k",
        "arch": "transformer",
        "model": {"d_model": 256, "heads": 4, "ffn": 1024, "enc_layers": 6, "dec_layers": 3,
                  "norm": "pre", "decoder_self": "attention"},
        "vocab_size": 8000,
        "dropout": 0.2, "attn_dropout": 0.1, "act_dropout": 0.1,
        "label_smoothing": 0.1,
        "lr": 1e-3, "warmup": 400, "betas": [0.9, 0.98], "eps": 1e-9, "clip_norm": 1.0,
        "batch_tokens": 6000, "bf16": False,
        "max_len": 128,
        "keep_checkpoints": 5, "average_last": 3,
        "test_sets": ["test_2016_flickr"],
    },
    # Tiny shapes for tests and smoke runs (seconds per epoch).
    "tiny-en-de": {
        "src": "en", "tgt": "de", "corpus": "multi30k",
        "arch": "transformer",
        "model": {"d_model": 32, "heads": 2, "ffn": 64, "enc_layers": 1, "dec_layers": 1,
                  "norm": "pre", "decoder_self": "attention"},
        "vocab_size": 8000,
        "dropout": 0.1, "attn_dropout": 0.0, "act_dropout": 0.0,
        "label_smoothing": 0.1,
        "lr": 1e-3, "warmup": 50, "betas": [0.9, 0.98], "eps": 1e-9, "clip_norm": 1.0,
        "batch_tokens": 4000, "bf16": False,
        "max_len": 128,
        "keep_checkpoints": 3, "average_last": 2,
        "test_sets": ["test_2016_flickr"],
    },
    # GAD block drafter (Xia et al. 2022): trained on distilled targets (--train-tgt) with
    # random-length gold prefixes; shallower than the verifier so drafting stays cheap.
    # Trained on blocks of 4..10 tokens (one size per batch), so one drafter serves every
    # block size; build_models chooses the fastest on the validation set and writes it as
    # block_size (8 until then: Multi30k targets average ~16 pieces).
    "drafter-en-de": {
        "src": "en", "tgt": "de", "corpus": "multi30k",
        "arch": "nat-drafter",
        "model": {"d_model": 256, "heads": 4, "ffn": 1024, "enc_layers": 4, "dec_layers": 2,
                  "norm": "pre", "decoder_self": "attention", "block_size": 8},
        "block_sizes": [4, 6, 8, 10],
        "vocab_size": 8000,
        "dropout": 0.1, "attn_dropout": 0.1, "act_dropout": 0.1,
        "label_smoothing": 0.1,
        "lr": 7e-4, "warmup": 200, "betas": [0.9, 0.98], "eps": 1e-9, "clip_norm": 1.0,
        "batch_tokens": 6000, "bf16": False,
        "max_len": 128,
        "keep_checkpoints": 5, "average_last": 5,
        "test_sets": ["test_2016_flickr"],
    },
    # Efficient student (Edinburgh WMT22 style): deep encoder, 2-layer SSRU decoder,
    # trained on distilled targets (--train-tgt); distilled data is cleaner, so less dropout.
    # Students and the drafter start from the teacher (--init, export/warm_start.py), so
    # their warm-up is shorter and their peak learning rate lower than from scratch.
    "student-en-de-ssru": {
        "src": "en", "tgt": "de", "corpus": "multi30k",
        "arch": "transformer",
        "model": {"d_model": 256, "heads": 4, "ffn": 1024, "enc_layers": 6, "dec_layers": 2,
                  "norm": "pre", "decoder_self": "ssru"},
        "vocab_size": 8000,
        "dropout": 0.1, "attn_dropout": 0.1, "act_dropout": 0.1,
        "label_smoothing": 0.1,
        "lr": 7e-4, "warmup": 200, "betas": [0.9, 0.98], "eps": 1e-9, "clip_norm": 1.0,
        "batch_tokens": 6000, "bf16": False,
        "max_len": 128,
        "keep_checkpoints": 5, "average_last": 5,
        "test_sets": ["test_2016_flickr"],
    },
    # Ukrainian GEC (UA-GEC gec-only, `python -m export.uagec` writes the corpus) for
    # input-guided aggressive decoding: the output mostly copies the input (52% of train
    # sentences need no edit), so the decoder can be shallow -- IAD verifies a whole copied
    # draft in one decoder pass, and 2 layers make that pass cheap; the deep encoder does
    # the reading. Same regularisation as the teacher: 31k pairs, as small as Multi30k.
    # "corpus" is an absolute directory: export.data.corpus_path joins it onto the shared
    # data root, and pathlib keeps an absolute right-hand side as is, so export.train reads
    # <corpus_dir()>/{train,val,test}.{src,tgt}.gz unchanged ($FASTDEC_UAGEC overrides).
    # max_len 128 drops 46 of 31,306 train pairs (0.15%, pieces of the uk-gec 8k spm).
    "uk-gec": {
        "src": "src", "tgt": "tgt", "corpus": str(corpus_dir()),
        "arch": "transformer",
        "model": {"d_model": 256, "heads": 4, "ffn": 1024, "enc_layers": 6, "dec_layers": 2,
                  "norm": "pre", "decoder_self": "attention"},
        "vocab_size": 8000,
        "dropout": 0.2, "attn_dropout": 0.1, "act_dropout": 0.1,
        "label_smoothing": 0.1,
        "lr": 1e-3, "warmup": 400, "betas": [0.9, 0.98], "eps": 1e-9, "clip_norm": 1.0,
        "batch_tokens": 6000, "bf16": False,
        "max_len": 128,
        "keep_checkpoints": 5, "average_last": 3,
        "test_sets": ["test"],
    },
}

# Issue 16: uk-gec pretrained on synthetic errors (export.gec_noise: UA-GEC train's
# corrected sides, 8 noisy copies each) before fine-tuning on UA-GEC itself
# (`export.train --recipe uk-gec --init <this run>/averaged.pt`). Val and test stay
# UA-GEC's real ones (gec_noise copies them into its directory).
RECIPES["uk-gec-synth"] = dict(RECIPES["uk-gec"], corpus=str(gec_synth_dir()), keep_checkpoints=3)

# The same student with an attention decoder: what engines without SSRU (CTranslate2,
# onnxruntime) can run, so they are compared on the same weights.
RECIPES["student-en-de-attn"] = dict(RECIPES["student-en-de-ssru"],
                                     model=dict(RECIPES["student-en-de-ssru"]["model"], decoder_self="attention"))

# Issue 32: general-domain En-De (export/general_en_de.py builds the ~151k pairs into
# general_dir(): $FASTDEC_GENERAL_EN_DE, set before Python starts, as for uk-gec's corpus).
# The teacher is trained on a GPU (tools/device/train_general_en_de.sh, ~8 minutes) and
# must come back from it: a device call returns at most 64 MiB in files of 16 MiB, so the
# float32 averaged checkpoint has to stay well under that. d512 6+6 (~50M parameters,
# ~200 MB) cannot come back; d256 6+3 (~10M, 40 MB, three 15 MiB parts) can, and suits
# 151k pairs. The 8k joint vocabulary keeps the student's int8 size under issue 32's
# 8 MB (a 16k one adds 2 MB of int8 embedding). More data than Multi30k, and a GPU budget
# of ~15 epochs, so dropout is lower and warm-up longer than teacher-en-de's.
RECIPES["teacher-en-de-general"] = dict(
    RECIPES["teacher-en-de"], corpus=str(general_dir()), dropout=0.1, warmup=1000,
    test_sets=["newstest2019", "flores200_devtest"])
# Its student: teacher-en-de-general's distilled targets (--train-tgt) and --init, the
# en-de student's shape (6+2, SSRU decoder) so the same engine paths and size.
RECIPES["student-en-de-general"] = dict(
    RECIPES["student-en-de-ssru"], corpus=str(general_dir()), test_sets=["newstest2019", "flores200_devtest"])

# Recipes for tests: a 40-piece vocabulary trained on a synthetic corpus (FASTDEC_DATA).
_TEST = {"vocab_size": 40, "batch_tokens": 256, "warmup": 5, "max_len": 64,
         "keep_checkpoints": 2, "average_last": 2}
RECIPES["test-tiny"] = dict(RECIPES["tiny-en-de"], **_TEST)
RECIPES["test-tiny-drafter"] = dict(RECIPES["tiny-en-de"], **_TEST, arch="nat-drafter", block_sizes=[2, 3],
                                    model=dict(RECIPES["tiny-en-de"]["model"], block_size=3))
RECIPES["test-tiny-ssru"] = dict(RECIPES["tiny-en-de"], **_TEST,
                                 model=dict(RECIPES["tiny-en-de"]["model"], decoder_self="ssru"))


def get_recipe(name: str) -> dict:
    if name not in RECIPES:
        raise KeyError(f"unknown recipe {name!r}; known: {', '.join(sorted(RECIPES))}")
    return dict(RECIPES[name])
