"""CTranslate2's vocabulary map (`vmap.txt`) written from a pyfastdec `shortlist.bin`,
so that CTranslate2 with `use_vmap=True` scores the same candidate target ids as our
shortlist does, and shortlist rows compare like with like.

CTranslate2's format (docs/translation.md, "Dynamic vocabulary reduction"; parsed by
src/vocabulary_map.cc, loaded from `vmap.txt` in the model directory when present): one
line per source n-gram, `src_1 ... src_N<TAB>tgt_1 ... tgt_K`, tokens being vocabulary
strings separated by single spaces; the line with the empty n-gram lists targets that
are always candidates. To unk, bos and eos, which it always adds, CTranslate2 adds the
targets of every n-gram of the batch's source tokens and the target prefix (its decoder
start token, our BOS).

From shortlist.bin (export/SHORTLIST_FORMAT.md):
- each source id with a non-empty row -> a unigram line: its piece, TAB, the pieces of
  its target ids in the file's order;
- the frequent ids, and the EOS row's targets -> the empty n-gram's line. Our engine
  looks up every source id of "ids + EOS", but CTranslate2 looks up the source tokens
  before it appends EOS (add_source_eos, pyfastdec/convert/ctranslate2_export.py), so the EOS row, which
  every sentence has, becomes always-on.
What a static map cannot express: our shortlist pads each sentence's candidates with
fewer than 8 unused ids to a multiple of 8 (padding only enlarges it), and CTranslate2
takes the union over a whole batch (a sub-batch with inter_threads) where ours is per
row. At batch 1 the two candidate sets are equal up to that padding
(bench/test_run_blockwise.py checks it on sentences).
"""
from __future__ import annotations

from pathlib import Path

VMAP_FILE = "vmap.txt"  # the name CTranslate2 looks for (src/models/sequence_to_sequence.cc)


def vmap_lines(shortlist, pieces: list[str], eos: int) -> list[str]:
    """The lines of vmap.txt (no newlines) for a pyfastdec Shortlist and the model's
    vocabulary strings (sentencepiece pieces in id order, as pyfastdec.convert registers
    them with CTranslate2)."""
    if len(pieces) != shortlist.vocab_size:
        raise ValueError(f"vmap: the shortlist is for a vocabulary of {shortlist.vocab_size}, "
                         f"the model has {len(pieces)} pieces")
    for i, p in enumerate(pieces):  # a space or tab inside a token would split it in vmap.txt
        if not p or any(c in p for c in " \t\n\r"):
            raise ValueError(f"vmap: piece {i} ({p!r}) is empty or holds whitespace; vmap.txt cannot list it")
    always = sorted(set(shortlist.frequent.tolist()) | set(shortlist.translations(eos)[0].tolist()))
    lines = ["\t" + " ".join(pieces[t] for t in always)]
    for f in range(shortlist.vocab_size):
        targets = shortlist.translations(f)[0]
        if targets.size:
            lines.append(pieces[f] + "\t" + " ".join(pieces[t] for t in targets.tolist()))
    return lines


def write_vmap(shortlist_file: Path, spm_file: Path, eos: int, out: Path) -> Path:
    """Write vmap.txt for `shortlist_file`; returns `out`."""
    import sentencepiece as spm

    from pyfastdec.model_dir.shortlist import Shortlist

    sp = spm.SentencePieceProcessor(model_file=str(spm_file))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    Path(out).write_text("\n".join(vmap_lines(Shortlist.load(shortlist_file), pieces, eos)) + "\n",
                         encoding="utf-8")
    return Path(out)
