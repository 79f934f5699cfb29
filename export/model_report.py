"""Quality figures of the trained models, as models/README.md reports them.

    python -m export.model_report [--models models] [--teacher /work/runs/models/teacher-en-de]
        [--threads 2] [--json FILE]

Every figure is decoded by the native engine (the float32 rows on the same weights the
tests check token for token against the PyTorch reference) and scored with sacreBLEU
(13a, cased, detokenized) and chrF against the raw references:
- teacher: float32 greedy and beam 5 on test_2016_flickr;
- en-de, en-de-attn: greedy as shipped (int8 + shortlist), int8 over the full
  vocabulary, and float32 (the dequantised weights); size on disk;
- en-de-drafter: GAD (lossless) with en-de (whose encoder it reads) as verifier, batch 1:
  drafted tokens accepted and tokens produced per iteration (mean over iterations), and
  that the outputs equal greedy's;
- en-de-little: BiLD with en-de-big as the big model, batch 1: lossless at the model's
  fallback (the same per-iteration figures, outputs equal to greedy's) and lossy at its
  lossy defaults (BLEU beside en-de-big's greedy BLEU);
- uk-gec: greedy on the UA-GEC test set against the first annotator and against both,
  next to copying the input; the share of output tokens copied from the input (tokens
  inside the longest matching blocks of input and output) and of unchanged sentences;
  edit-level precision, recall and F0.5 per annotator and with the better one per
  sentence (export/gec_score.py; copying the input scores F0.5 = 0). Then what users get
  beside the raw ids: greedy with the model's edit margin (config.json
  decoding.edit_margin) decoded plainly, the same ids written by copy-through
  (pyfastdec/copy_through.py), and Corrector(threads).correct on the lines (sentence
  splitting, copy-through, sentences it cannot read kept), without and with its
  repetition guard (looping corrections dropped: pyfastdec/repetition_guard.py).
"""
from __future__ import annotations

import argparse
import difflib
import json
from pathlib import Path

import sacrebleu

from pyfastdec.api import Corrector
from pyfastdec.backends.native import NativeBackend
from pyfastdec.copy_through import CopyThrough
from pyfastdec.model_dir import read_config as read_model_config
from pyfastdec.decoding import beam_search, gad, greedy
from pyfastdec.decoding.bild import bild
from pyfastdec.text import Tokenizer

from .data import load_pairs, read_lines
from . import gec_score
from .uagec import ensure_corpus
from .writer import read_config, write_float_twin

REPO = Path(__file__).resolve().parents[1]


def batched(fn, src: list[list[int]], batch_size: int):
    outs, stats = [], []
    for i in range(0, len(src), batch_size):
        o, s = fn(src[i:i + batch_size])
        outs += o
        stats.append(s)
    return outs, stats


def quality(hyps: list[str], refs: list[list[str]]) -> dict:
    return {"bleu": round(sacrebleu.corpus_bleu(hyps, refs).score, 2),
            "chrf": round(sacrebleu.corpus_chrf(hyps, refs).score, 2)}


def dir_megabytes(path: Path) -> float:
    return round(sum(f.stat().st_size for f in path.iterdir() if f.is_file()) / 2**20, 1)


def encode(model_dir: Path, sources: list[str]) -> tuple[Tokenizer, list[list[int]]]:
    """The model's tokenizer and the source ids, each ending in EOS as strategies take them."""
    tok = Tokenizer(model_dir / "spm.model")
    eos = read_config(model_dir).tokens["eos"]
    return tok, [tok.encode(s) + [eos] for s in sources]


class Reporter:
    def __init__(self, models: Path, threads: int, work: Path):
        self.models, self.threads, self.work = models, threads, work
        self.flickr = load_pairs("test_2016_flickr", "en", "de", "multi30k")

    def translate(self, backend: NativeBackend, model_dir: Path, beam: int = 1) -> dict:
        tok, src = encode(model_dir, [s for s, _ in self.flickr])
        if beam > 1:
            outs, _ = batched(lambda b: beam_search(backend, b, beam_size=beam, nbest=1), src, 16)
            outs = [h[0].tokens for h in outs]
        else:
            outs, _ = batched(lambda b: greedy(backend, b), src, 32)
        return quality([tok.decode(o) for o in outs], [[t for _, t in self.flickr]])

    def float_twin(self, model_dir: Path) -> Path:
        return write_float_twin(model_dir, self.work / f"{model_dir.name}-float32")

    def teacher(self, path: Path) -> dict:
        backend = NativeBackend(path, threads=self.threads)
        return {"float32 greedy": self.translate(backend, path), "float32 beam 5": self.translate(backend, path, 5)}

    def student(self, name: str) -> dict:
        path = self.models / name
        return {"megabytes": dir_megabytes(path),
                "int8 + shortlist greedy": self.translate(NativeBackend(path, threads=self.threads), path),
                "int8 greedy": self.translate(NativeBackend(path, threads=self.threads, shortlist=False), path),
                "float32 greedy": self.translate(NativeBackend(self.float_twin(path), threads=self.threads),
                                                 path)}

    def drafter(self, verifiers: list[str]) -> dict:
        path = self.models / "en-de-drafter"
        drafter = NativeBackend(path, threads=self.threads)
        result = {"megabytes": dir_megabytes(path), "block_size": drafter.block_size}
        for name in verifiers:
            verifier = NativeBackend(self.models / name, threads=self.threads)
            _, src = encode(path, [s for s, _ in self.flickr])
            expected, _ = batched(lambda b: greedy(verifier, b), src, 32)
            outs, stats = batched(lambda b: gad(verifier, drafter, b), src, 1)
            iterations = sum(s.iterations for s in stats)
            result[f"GAD with {name}"] = {
                "equals greedy": outs == expected,
                "accepted per iteration": round(sum(s.accepted for s in stats) / iterations, 2),
                "tokens per iteration": round(sum(s.generated for s in stats) / iterations, 2)}
        return result

    def little(self) -> dict:
        path, big_path = self.models / "en-de-little", self.models / "en-de-big"
        little, big = NativeBackend(path, threads=self.threads), NativeBackend(big_path, threads=self.threads)
        chosen = little.config.bild or {}
        tok, src = encode(big_path, [s for s, _ in self.flickr])
        refs = [[t for _, t in self.flickr]]
        expected, _ = batched(lambda b: greedy(big, b), src, 32)
        result = {"megabytes": dir_megabytes(path), "decoding": chosen,
                  "en-de-big greedy BLEU": round(sacrebleu.corpus_bleu([tok.decode(o) for o in expected], refs).score, 2)}
        for name, kw in (("lossless", {"fallback": chosen.get("fallback", 0.5)}),
                         ("lossy", {"fallback": chosen.get("lossy_fallback", 0.5), "rollback": chosen.get("rollback", 1.0)})):
            outs, stats = batched(lambda b: bild(big, little, b, **kw), src, 1)
            iterations = sum(s.iterations for s in stats)
            result[f"BiLD {name}"] = {
                "equals greedy": outs == expected,
                "BLEU": round(sacrebleu.corpus_bleu([tok.decode(o) for o in outs], refs).score, 2),
                "accepted per iteration": round(sum(s.accepted for s in stats) / iterations, 2),
                "tokens per iteration": round(sum(s.generated for s in stats) / iterations, 2)}
        return result

    def gec(self) -> dict:
        path = self.models / "uk-gec"
        data = ensure_corpus()
        sources = read_lines(data / "test.src.gz")
        refs = [read_lines(data / "test.tgt.gz"), read_lines(data / "test.tgt2.gz")]
        tok, src = encode(path, sources)
        outs, _ = batched(lambda b: greedy(NativeBackend(path, threads=self.threads), b), src, 32)
        hyps = [tok.decode(o) for o in outs]
        copied = total = 0
        for s, o in zip(src, outs):
            blocks = difflib.SequenceMatcher(a=s[:-1], b=o, autojunk=False).get_matching_blocks()
            copied += sum(b.size for b in blocks)
            total += len(o)
        return {"megabytes": dir_megabytes(path), "sentences": len(sources),
                "greedy vs annotator 1": quality(hyps, refs[:1]), "greedy vs both": quality(hyps, refs),
                "copy input vs annotator 1": quality(sources, refs[:1]), "copy input vs both": quality(sources, refs),
                "edits (export.gec_score)": gec_score.score(sources, hyps, refs),
                "output tokens copied from input %": round(100 * copied / max(total, 1), 1),
                "sentences unchanged %": round(100 * sum(h == s for h, s in zip(hyps, sources)) / len(sources), 1),
                **self.gec_as_used(path, tok, src, sources, refs)}

    def gec_as_used(self, path: Path, tok: Tokenizer, src: list[list[int]], sources: list[str],
                    refs: list[list[str]]) -> dict:
        """What users get: the model's edit margin, then copy-through, then the Corrector
        without and with its repetition guard (pyfastdec/repetition_guard.py)."""
        margin = read_model_config(path / "config.json").edit_margin
        backend = NativeBackend(path, threads=self.threads)
        outs, _ = batched(lambda b: greedy(backend, b, edit_margin=margin), src, 32)
        copy = CopyThrough(tok.sp)
        corrector = Corrector(path, threads=self.threads)
        rows = {f"greedy, edit margin {margin}, decoded": [tok.decode(o) for o in outs],
                f"greedy, edit margin {margin}, copy-through": [copy.text(copy.source.pieces(s), o)
                                                                for s, o in zip(sources, outs)],
                "Corrector().correct, no repetition guard": corrector.correct(sources, repetition_guard=False),
                "Corrector().correct (what users get)": corrector.correct(sources)}

        def scores(hyps: list[str]) -> dict:
            return {"vs annotator 1": quality(hyps, refs[:1]), "edits (export.gec_score)": gec_score.score(
                sources, hyps, refs), "sentences unchanged %": round(
                100 * sum(h == s for h, s in zip(hyps, sources)) / len(sources), 1)}
        return {name: scores(hyps) for name, hyps in rows.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=Path, default=REPO / "models")
    ap.add_argument("--teacher", type=Path, default=Path("/work/runs/models/teacher-en-de"))
    ap.add_argument("--only", nargs="+", choices=["teacher", "en-de", "en-de-attn", "en-de-drafter", "en-de-little",
                                                  "uk-gec"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/fastdec-model-report"))
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    reporter = Reporter(args.models, args.threads, args.work)
    wanted = args.only or ["teacher", "en-de", "en-de-attn", "en-de-drafter", "en-de-little", "uk-gec"]
    report = {}
    for name in wanted:
        if name == "teacher":
            report[name] = reporter.teacher(args.teacher)
        elif name == "en-de-drafter":
            report[name] = reporter.drafter(["en-de"])
        elif name == "en-de-little":
            report[name] = reporter.little()
        elif name == "uk-gec":
            report[name] = reporter.gec()
        else:
            report[name] = reporter.student(name)
        print(json.dumps({name: report[name]}, indent=1), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
