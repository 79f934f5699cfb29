"""The decoders under test, as the measuring process builds them (bench/child.py).

`load(spec)` returns a Runner whose `decode(batch)` maps source id lists (sentencepiece
ids + EOS) to output id lists (no BOS/EOS), whatever the engine. Imports happen here, in
the measuring process only, so no engine is loaded where it is not measured.

Output length: every engine gets pyfastdec's default limit, relative to len(source incl.
EOS) (pyfastdec.decoding.limits.default_max_len); CTranslate2 takes one limit per call, so at batch > 1
it gets the batch's largest (identical at batch 1).
"""
from __future__ import annotations

from pathlib import Path

from bench.system_runner import Runner
from bench.vmap import VMAP_FILE

STRATEGIES = ("greedy", "beam5", "gad", "gad-shared", "gad++", "iad", "blockwise", "blockwise-all", "bild",
              "bild-lossy")
GADPP_BETA, GADPP_TAU = 3, 1.0  # GAD++ quality setting of Xia et al. (2022)
BEAM = 5


def _add_stats(counters: dict, stats) -> None:
    for name in ("sentences", "iterations", "row_steps", "drafted", "accepted", "generated"):
        counters[name] = counters.get(name, 0) + getattr(stats, name)
    for name in ("encoder_s", "drafter_s", "verifier_s", "total_s"):
        counters[name] = counters.get(name, 0.0) + getattr(stats, name)


def _strategy(name: str, backend, drafter, spec=None):
    """`batch -> (outputs, stats)` as pyfastdec.Translator runs `name` (the strategy
    registry's batch_runner): one cost policy for the whole run, so the costs it measures
    on early batches steer the later ones. draft_policy False (bench.run
    --no-draft-policy): GAD and BiLD draft every iteration."""
    from pyfastdec.decoding.strategies import batch_runner

    use = (spec or {}).get("draft_policy", True)
    if name == "greedy":
        return batch_runner("greedy", backend)
    if name == "beam5":
        run = batch_runner("beam", backend, beam_size=BEAM)

        def beam(batch):
            hyps, stats = run(batch)
            return [h[0].tokens for h in hyps], stats
        return beam
    if name in ("gad", "gad-shared"):  # gad-shared: the drafter reads the verifier's memory (gad.py)
        return batch_runner("gad", backend, drafter, policy=use)
    if name in ("bild", "bild-lossy"):
        return batch_runner(name, backend, drafter, policy=use, fallback=float(spec["fallback"]),
                            rollback=float(spec["rollback"]))
    if name == "gad++":
        return batch_runner("gad++", backend, drafter, policy=use, beta=GADPP_BETA, tau=GADPP_TAU)
    if name == "iad":
        return batch_runner("iad", backend)
    if name == "blockwise":  # the cost policy verifies as many of the K proposals as pay
        return batch_runner("blockwise", backend)
    if name == "blockwise-all":  # all K proposals verified every iteration: the heads' raw tokens per iteration
        return batch_runner("blockwise", backend, policy=False)
    raise ValueError(f"unknown strategy {name!r}; expected one of {STRATEGIES}")


def _strategy_runner(backend, spec, drafter=None, info=None) -> Runner:
    runner = Runner(decode=None, info=info or {})
    run = _strategy(spec["strategy"], backend, drafter, spec)

    def decode(batch):
        outs, stats = run(batch)
        _add_stats(runner.counters, stats)
        return outs
    runner.decode = decode
    return runner


def _lanes_runner(spec) -> Runner:
    """pyfastdec as CTranslate2 runs with inter_threads=N (load_ct2): each batch cut into
    N contiguous sub-batches, decoded at once, each by engines of its own (spec["threads"]
    each) on a thread of its own, as Translator(inter_threads=N) decodes its batches
    (pyfastdec/lanes.py: the engines release the GIL). Counts are summed over the lanes;
    their seconds overlap, so these rows report no decoder-loop split."""
    from concurrent.futures import ThreadPoolExecutor

    inter = spec["inter"]
    lanes = [load_pyfastdec(dict(spec, inter=1)) for _ in range(inter)]
    pool = ThreadPoolExecutor(inter, thread_name_prefix="lane")
    runner = Runner(decode=None, info=dict(lanes[0].info, inter_threads=inter))

    def decode(batch):
        size = max(1, -(-len(batch) // inter))
        parts = [batch[i:i + size] for i in range(0, len(batch), size)]
        outs = list(pool.map(lambda lane_part: lane_part[0].decode(lane_part[1]), zip(lanes, parts)))
        for lane in lanes:
            for name, value in lane.counters.items():
                if not name.endswith("_s"):
                    runner.counters[name] = runner.counters.get(name, 0) + value
            lane.counters.clear()
        return [out for part in outs for out in part]
    runner.decode = decode
    return runner


def load_pyfastdec(spec) -> Runner:
    if spec.get("inter", 1) > 1:
        return _lanes_runner(spec)
    import pyfastdec
    from pyfastdec.backends.native import NativeBackend

    backend = NativeBackend(spec["path"], threads=spec["threads"], shortlist=spec["shortlist"])
    if spec["shortlist"] and backend.shortlist is None:
        raise ValueError(f"{spec['path']}: no shortlist.bin")
    if spec["strategy"].startswith("blockwise") and not backend.proposal_heads:
        raise ValueError(f"{spec['path']}: no proposal heads (config.json field 'heads')")
    drafter = None
    if spec["strategy"] in ("gad", "gad++", "gad-shared"):
        # The drafter uses its own shortlist.bin (if any) whenever the verifier uses one; a
        # shared-encoder drafter uses the verifier's (attach carries it).
        drafter = NativeBackend(spec["drafter"], threads=spec["threads"], shortlist=spec["shortlist"])
        if drafter.shares_encoder != (spec["strategy"] == "gad-shared"):
            raise ValueError(f"{spec['drafter']}: {spec['strategy']} needs a drafter "
                             f"{'without' if spec['strategy'] == 'gad-shared' else 'with'} an encoder of its own "
                             f"(config.json encoder.shared)")
    if spec["strategy"] in ("bild", "bild-lossy"):
        drafter = NativeBackend(spec["little"], threads=spec["threads"], shortlist=False)  # attach: big's lists
    info = {"isa": pyfastdec.cpu_info()["isa"], "kernels": pyfastdec.cpu_info()["kernels"],
            "version": pyfastdec.__version__}
    return _strategy_runner(backend, spec, drafter, info)


def load_onnx(spec) -> Runner:
    import onnxruntime

    from pyfastdec.backends.onnx import OnnxBackend

    backend = OnnxBackend(spec["path"], threads=spec["threads"])
    info = {"version": onnxruntime.__version__, "weights": backend.export_info.get("weights"),
            "providers": ["CPUExecutionProvider"]}
    return _strategy_runner(backend, spec, info=info)


def load_torch(spec) -> Runner:
    import torch

    from export.torch_backend import TorchBackend

    torch.set_num_threads(spec["threads"])
    torch.set_num_interop_threads(1)
    backend = TorchBackend.from_dir(spec["path"])
    info = {"version": torch.__version__, "isa": torch.backends.cpu.get_cpu_capability()}
    return _strategy_runner(backend, spec, info=info)


def load_ct2(spec) -> Runner:
    import ctranslate2
    import sentencepiece as spm

    from pyfastdec.decoding.limits import default_max_len

    translator = ctranslate2.Translator(spec["path"], device="cpu", compute_type=spec["compute_type"],
                                       intra_threads=spec["intra"], inter_threads=spec["inter"])
    sp = spm.SentencePieceProcessor(model_file=f"{spec['path']}/spm.model")
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    beam = BEAM if spec["strategy"] == "beam5" else 1
    if spec["strategy"] not in ("greedy", "beam5"):
        raise ValueError(f"CTranslate2 runs greedy and beam5, not {spec['strategy']!r}")
    inter = spec["inter"]
    # The vocabulary map (vmap.txt in the model directory, bench/vmap.py) restricts the
    # output layer to the candidates of the batch's source tokens, as our shortlist does.
    use_vmap = bool(spec.get("vmap"))
    if use_vmap and not (Path(spec["path"]) / VMAP_FILE).is_file():
        raise ValueError(f"{spec['path']}: no {VMAP_FILE} for use_vmap")

    def decode(batch):
        # The converter sets add_source_eos, so CTranslate2 gets the pieces without EOS.
        tokens = [[pieces[t] for t in s[:-1]] for s in batch]
        # With inter_threads > 1 one call is split into sub-batches its workers decode in
        # parallel; min_decoding_length=0 allows the empty output greedy allows.
        results = translator.translate_batch(
            tokens, beam_size=beam, max_batch_size=max(1, -(-len(batch) // inter)), use_vmap=use_vmap,
            min_decoding_length=0, max_decoding_length=max(default_max_len(len(s)) for s in batch))
        return [[sp.piece_to_id(p) for p in r.hypotheses[0]] for r in results]
    return Runner(decode=decode, info={"version": ctranslate2.__version__, "beam_size": beam,
                                       "length_penalty": 1.0, "use_vmap": use_vmap})


def load_marian(spec) -> Runner:
    from bench.marian import load_marian as load

    return load(spec)


LOADERS = {"pyfastdec": load_pyfastdec, "ct2": load_ct2, "marian": load_marian, "onnx": load_onnx,
           "torch": load_torch}


def load(spec) -> Runner:
    return LOADERS[spec["system"]](spec)
