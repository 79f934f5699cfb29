"""Proposal heads (blockwise parallel decoding): the model directory format, the torch
reference, the writer and the native engine's Want.proposals.

References, each independent of the code it checks:
- reference_step: the torch model re-run over the whole prefix (no cache, no Backend),
  the argmax and the heads' argmax restricted to the row's shortlist by masking, j by
  a plain Python loop;
- numpy_proposals: one head computed with numpy from the tensors of model.safetensors
  (s -> s + fc2(relu(fc1 s)) -> tied output layer -> argmax);
- pyfastdec.decoding.draft_verify.accept_argmax for j.
The verifiers are the tiny TRAINED ones (tests/test_decoding_support.py), with random
heads: drafts built from their greedy outputs are accepted up to a chosen corruption,
so j takes every value from 0 to the full draft.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the reference models need the 'test' extra (torch)")

from safetensors.torch import load_file, save_file  # noqa: E402

from export.calibrate import calibrate  # noqa: E402
from export.tiny import tiny_model, tiny_spm  # noqa: E402
from export.tiny_task import task_sources, translate  # noqa: E402
from export.torch_backend import TorchBackend  # noqa: E402
from export.writer import read_model_dir, write_model_dir  # noqa: E402
from pyfastdec.backends.base import StepOut, Want  # noqa: E402
from pyfastdec.backends.native import NativeBackend  # noqa: E402
from pyfastdec.decoding.draft_verify import accept_argmax  # noqa: E402
from pyfastdec.model_dir import ModelDir, ModelDirError  # noqa: E402
from pyfastdec.model_dir.shortlist import Shortlist  # noqa: E402

from test_decoding_support import BOS, EOS, V, VARIANTS, tiny_verifier  # noqa: E402

torch.set_num_threads(1)
K, HIDDEN = 4, 24
# Per row: (draft length, index of the first wrong draft token or None). Covers no
# draft, a full draft accepted whole, rejections at the first and a middle token.
ROWS = [(0, None), (4, None), (4, 0), (3, 1), (2, None), (4, 2), (1, 0)]


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")


def with_heads(model, seed: int = 7):
    """Random heads, their fc2 scaled up: at xavier scale a head barely moves s and echoes
    the main argmax; larger, they propose other tokens, as trained heads do."""
    torch.manual_seed(seed)
    model.add_heads(K, HIDDEN)
    with torch.no_grad():
        for head in model.heads:
            head.fc2.weight.mul_(4.0)
    return model


@pytest.fixture(scope="module", params=list(VARIANTS))
def float_pair(request, spm, tmp_path_factory):
    """(torch model with heads, its float32 directory, source rows)."""
    model = with_heads(tiny_verifier(**VARIANTS[request.param]))
    path = write_model_dir(model, spm, tmp_path_factory.mktemp(request.param) / "m")
    return model, path


def task_shortlist(path):
    """Each source word may become itself or its task mapping; ids 5..9 always."""
    from export.tiny_task import _MAP
    per_source = {w: sorted({w, _MAP[w]}) for w in range(5, V)}
    indptr = np.zeros(V + 1, np.uint64)
    targets = []
    for f in range(V):
        targets += per_source.get(f, [])
        indptr[f + 1] = indptr[f] + len(per_source.get(f, []))
    Shortlist(V, [EOS, 5, 6, 7, 8, 9], indptr, targets, best=4, first_fill_id=5).save(path)
    return path


# ----------------------------------------------------------------------------- references
def drafts_for(truth: list[int], length: int, wrong_at: int | None) -> list[int]:
    """The next `length` tokens of the greedy output, one replaced by another id."""
    d = (truth + [EOS] * length)[:length]
    if wrong_at is not None and wrong_at < length:
        d[wrong_at] = 5 + (d[wrong_at] - 5 + 1) % (V - 5)
    return d


@torch.no_grad()
def reference_step(model, src: list[int], held: list[int], step_tokens: list[int], length: int,
                   columns: np.ndarray | None):
    """Argmax per new position, j, and the heads' argmax at j, by full recomputation."""
    ids = torch.tensor([held + step_tokens])
    memory, keep = model.encode(torch.tensor([src]))
    h = model.decode_full(ids, memory, keep)[0, len(held):]
    allowed = torch.zeros(V, dtype=torch.bool)
    allowed[torch.as_tensor(np.arange(V) if columns is None else columns, dtype=torch.long)] = True
    masked = lambda logits: logits.masked_fill(~allowed, float("-inf")).argmax(-1)  # noqa: E731
    argmax = masked(model.logits(h)).tolist()
    j = 0
    while j < length and step_tokens[1 + j] == argmax[j]:
        j += 1
    return argmax, j, masked(model.proposal_logits(h[j])).tolist()


def numpy_proposals(tensors: dict, s: np.ndarray) -> np.ndarray:
    """Every head's argmax for final states s [rows, d], from float32 tensors alone."""
    s = s.astype(np.float64)
    out = []
    for i in range(K):
        w1, b1 = tensors[f"heads.{i}.fc1.weight"], tensors[f"heads.{i}.fc1.bias"]
        w2, b2 = tensors[f"heads.{i}.fc2.weight"], tensors[f"heads.{i}.fc2.bias"]
        h = s + np.maximum(s @ w1.T + b1, 0.0) @ w2.T + b2
        out.append(np.argmax(h @ tensors["embed.weight"].T + tensors["output.bias"], axis=-1))
    return np.stack(out, axis=1)


def greedy_truth(model, sources) -> list[list[int]]:
    from export.decode import greedy
    return greedy(model, sources, batch_size=len(sources))


def verify_loop(backends, sources, truths, iterations: int = 3):
    """Runs the same verify steps (drafts from ROWS, row r using ROWS[r % len]) on every
    backend, truncating each to its own accepted prefix; yields, per step, the StepOut of
    each backend and the step's tokens and draft lengths."""
    rows = len(sources)
    states = [b.start(b.encode(sources)) for b in backends]
    outs = [list() for _ in range(rows)]  # accepted output so far (no BOS)
    first = [b.step(s, np.full((rows, 1), BOS), Want(proposals=np.zeros(rows, dtype=np.int64)))
             for b, s in zip(backends, states)]
    yield first, np.full((rows, 1), BOS), np.zeros(rows, dtype=np.int64)
    pending = first[0].argmax[:, 0].copy()
    for it in range(iterations):
        spec = [ROWS[(r + it) % len(ROWS)] for r in range(rows)]
        lengths = np.array([n for n, _ in spec], dtype=np.int64)
        width = 1 + int(lengths.max())
        tokens = np.zeros((rows, width), dtype=np.int64)
        tokens[:, 0] = pending
        for r, (n, wrong) in enumerate(spec):
            after = truths[r][len(outs[r]) + 1:]  # the greedy tokens that follow `pending`
            # Past the draft length the padding holds the right tokens too: a backend
            # that looks beyond a row's draft length accepts them.
            tokens[r, 1:] = drafts_for(after, width - 1, wrong)
        got = [b.step(s, tokens, Want(proposals=lengths)) for b, s in zip(backends, states)]
        yield got, tokens, lengths
        j = got[0].accepted
        for r in range(rows):
            outs[r] += [int(pending[r])] + tokens[r, 1:1 + j[r]].tolist()
        for b, s in zip(backends, states):
            b.truncate(s, s.lengths - width + 1 + j)
        pending = got[0].argmax[np.arange(rows), j]


# ----------------------------------------------------------------------------- engine vs reference
@pytest.mark.parametrize("rows", [1, 7])
def test_native_float32_equals_torch_reference(float_pair, rows):
    model, path = float_pair
    sources = task_sources(rows, seed=40 + rows)
    truths = greedy_truth(model, sources)
    native, ref = NativeBackend(path, threads=1, shortlist=False), TorchBackend(model)
    seen = set()
    for (n_out, t_out), tokens, lengths in verify_loop([native, ref], sources, truths):
        np.testing.assert_array_equal(n_out.argmax, t_out.argmax)
        np.testing.assert_array_equal(n_out.accepted, t_out.accepted)
        np.testing.assert_array_equal(n_out.proposals, t_out.proposals)
        assert n_out.proposals.shape == (rows, K) and n_out.proposals.dtype == np.int64
        j, _ = accept_argmax(StepOut(argmax=n_out.argmax), tokens[:, 1:], lengths)
        np.testing.assert_array_equal(n_out.accepted, j)
        seen |= {(int(a), int(n)) for a, n in zip(n_out.accepted, lengths)}
    if rows > 1:  # j = 0 with and without a draft, partial and whole drafts accepted
        assert {(0, 0), (4, 4)} <= seen and any(0 < a < n for a, n in seen) and any(a == 0 < n for a, n in seen)


@pytest.mark.parametrize("shortlist", [False, True])
def test_native_equals_full_recomputation(float_pair, shortlist, tmp_path):
    """Against reference_step, each row alone, with its shortlist when on: proposals come
    from the row's own candidates only."""
    model, path = float_pair
    sl_file = task_shortlist(tmp_path / "sl.bin") if shortlist else False
    native = NativeBackend(path, threads=1, shortlist=sl_file)
    sl = Shortlist.load(sl_file) if shortlist else None
    sources = task_sources(7, seed=50)
    truths = greedy_truth(model, sources)
    held = [[] for _ in sources]
    for (out,), tokens, lengths in verify_loop([native], sources, truths):
        for r, src in enumerate(sources):
            columns = None if sl is None else sl.candidates(src)
            step_tokens = tokens[r].tolist()
            argmax, j, proposals = reference_step(model, src, held[r], step_tokens, int(lengths[r]), columns)
            assert out.argmax[r].tolist() == argmax
            assert out.accepted[r] == j
            assert out.proposals[r].tolist() == proposals
            if columns is not None:
                assert np.isin(out.proposals[r], columns).all()
            held[r] += step_tokens[:1 + j]


def test_shortlist_changes_proposals(float_pair, tmp_path):
    """The shortlist test above is not vacuous: some proposals differ with it off."""
    model, path = float_pair
    sources = task_sources(7, seed=50)
    sl_file = task_shortlist(tmp_path / "sl.bin")
    got = []
    for backend in (NativeBackend(path, threads=1, shortlist=False), NativeBackend(path, threads=1, shortlist=sl_file)):
        state = backend.start(backend.encode(sources))
        got.append(backend.step(state, np.full((7, 1), BOS), Want(proposals=np.zeros(7, np.int64))).proposals)
    assert (got[0] != got[1]).any()


def test_one_head_in_numpy(float_pair):
    """The heads' math from the stored tensors alone, on the torch model's final states
    at the accepted positions."""
    model, path = float_pair
    sources = task_sources(7, seed=60)
    truths = greedy_truth(model, sources)
    native = NativeBackend(path, threads=1, shortlist=False)
    tensors = {k: np.asarray(v, dtype=np.float64) for k, v in ModelDir.load(path).tensors.items()}
    held = [[] for _ in sources]
    for (out,), tokens, lengths in verify_loop([native], sources, truths):
        for r, src in enumerate(sources):
            ids = torch.tensor([held[r] + tokens[r].tolist()])
            with torch.no_grad():
                memory, keep = model.encode(torch.tensor([src]))
                s = model.decode_full(ids, memory, keep)[0, len(held[r]) + out.accepted[r]].numpy()
            np.testing.assert_array_equal(out.proposals[r], numpy_proposals(tensors, s[None])[0])
            held[r] += tokens[r, :1 + out.accepted[r]].tolist()


def test_int8_agrees_with_simulated_int8(spm, tmp_path):
    """int8 native vs torch with int8 weights and simulated int8 activations (heads
    included). Not exact: the native output layer is int8 (dynamic per token), which
    torch keeps in float, so near-ties may flip; nearly every id agrees."""
    model = with_heads(tiny_verifier())
    pairs = [(s[:-1], translate(s)) for s in task_sources(64, seed=5)]
    scales = calibrate(model, pairs)
    path = write_model_dir(model, spm, tmp_path / "q", act_scales=scales, int8=True)
    native = NativeBackend(path, threads=1, shortlist=False)
    sim = TorchBackend.from_dir(path, simulate_int8=True)
    sources = task_sources(16, seed=70)
    truths = greedy_truth(model, sources)
    same = total = j_same = rows = 0
    for (n_out, t_out), _, _ in verify_loop([native, sim], sources, truths, iterations=4):
        same += int((n_out.proposals == t_out.proposals).sum())
        total += n_out.proposals.size
        j_same += int((n_out.accepted == t_out.accepted).sum())
        rows += len(n_out.accepted)
    assert same / total >= 0.9 and j_same / rows >= 0.9, (same / total, j_same / rows)


def test_int8_shortlist_scores_only_candidates(spm, tmp_path):
    """int8 with a shortlist runs the output layer on column subsets, bit-identical to
    the full layer: a head's proposal is the full-vocabulary one whenever that one is a
    candidate, and a candidate always."""
    model = with_heads(tiny_verifier())
    pairs = [(s[:-1], translate(s)) for s in task_sources(64, seed=5)]
    path = write_model_dir(model, spm, tmp_path / "q", act_scales=calibrate(model, pairs), int8=True)
    sl = Shortlist.load(task_shortlist(tmp_path / "sl.bin"))
    full = NativeBackend(path, threads=1, shortlist=False)
    short = NativeBackend(path, threads=1, shortlist=tmp_path / "sl.bin")
    sources = task_sources(7, seed=80)
    states = [b.start(b.encode(sources)) for b in (full, short)]
    tokens = np.full((7, 1), BOS)
    inside = 0
    for _ in range(5):  # n = 1 steps (j = 0), both fed the full model's tokens
        f, s = (b.step(st, tokens, Want(proposals=np.zeros(7, np.int64))) for b, st in zip((full, short), states))
        for r, src in enumerate(sources):
            cand = sl.candidates(src)
            assert np.isin(s.proposals[r], cand).all()
            hit = np.isin(f.proposals[r], cand)
            np.testing.assert_array_equal(s.proposals[r][hit], f.proposals[r][hit])
            inside += int(hit.sum())
        tokens = f.argmax
    assert 0 < inside < 7 * 5 * K  # both cases occur


# ----------------------------------------------------------------------------- refusals
def test_model_without_heads_refuses_proposals(spm, tmp_path):
    model = tiny_verifier()
    path = write_model_dir(model, spm, tmp_path / "plain")
    for backend in (NativeBackend(path, threads=1), TorchBackend.from_dir(path)):
        assert backend.proposal_heads == 0
        state = backend.start(backend.encode([[7, 8, EOS]]))
        with pytest.raises(ValueError, match=f"{re.escape(str(path))} has no proposal heads"):
            backend.step(state, np.full((1, 1), BOS), Want(proposals=np.zeros(1, np.int64)))
        assert state.lengths.tolist() == [0]  # refused before anything ran


def test_bad_proposal_requests(float_pair):
    _, path = float_pair
    for backend in (NativeBackend(path, threads=1), TorchBackend.from_dir(path)):
        assert backend.proposal_heads == K
        state = backend.start(backend.encode([[7, 8, EOS], [9, EOS]]))
        tokens = np.full((2, 3), 7)
        with pytest.raises(ValueError, match="argmax=True"):
            backend.step(state, tokens, Want(argmax=False, proposals=np.zeros(2, np.int64)))
        with pytest.raises(ValueError, match=r"proposals\[1\] = 3 draft tokens, outside \[0, 2\]"):
            backend.step(state, tokens, Want(proposals=np.array([2, 3])))
        with pytest.raises(ValueError, match=r"\[rows=2\]"):
            backend.step(state, tokens, Want(proposals=np.zeros(3, np.int64)))
        assert state.lengths.tolist() == [0, 0]


def test_engine_binding_checks_proposals(float_pair):
    """The pybind layer checks on its own (callers of pyfastdec._engine directly)."""
    _, path = float_pair
    model = NativeBackend(path, threads=1)._model
    state = model.start(model.encode([[7, EOS]], None))
    with pytest.raises(ValueError, match="outside"):
        model.step(state, np.full((1, 2), 7), proposals=np.array([2]))
    with pytest.raises(ValueError, match="argmax"):
        model.step(state, np.full((1, 2), 7), argmax=False, proposals=np.array([1]))
    assert model.proposal_heads == K


# ----------------------------------------------------------------------------- format
def edited(path, change) -> None:
    """Applies change(config dict) to config.json and drops its checksum."""
    file = path / "config.json"
    cfg = json.loads(file.read_text())
    cfg.pop("checksum")
    change(cfg)
    file.write_text(json.dumps(cfg))


@pytest.mark.parametrize("change, message", [
    (lambda c: c.update(heads={"count": 0, "hidden": 24}), r"heads.count: 0 \(expected a positive integer\)"),
    (lambda c: c.update(heads={"count": 4, "hidden": "24"}), r'heads.hidden: "24" \(expected a positive integer\)'),
    (lambda c: c.update(heads={"count": 4}), "heads.hidden: missing"),
    (lambda c: c.update(heads={"count": 4, "hidden": 24, "k": 1}), "heads.k: unknown field"),
    (lambda c: c.update(heads=[4, 24]), "heads: \\[4, 24\\] \\(expected"),
    (lambda c: c["heads"].update(hidden=12),
     r"model.safetensors: heads.0.fc1.weight: shape \[24, 16\] \(expected \[12, 16\] from config.json "
     r"heads.hidden 12 and d_model 16\)"),
    (lambda c: c["heads"].update(count=5), "heads.4.fc1.weight: missing tensor"),
    (lambda c: c.pop("heads"), r"heads\.\d\.fc\d\.\w+: unexpected tensor"),
])
def test_bad_heads_config_is_refused(spm, tmp_path, change, message):
    path = write_model_dir(with_heads(tiny_model(seed=1)), spm, tmp_path / "m")
    edited(path, change)
    with pytest.raises(ModelDirError, match=message):
        ModelDir.load(path)


def test_heads_in_a_drafter_are_refused(spm, tmp_path):
    path = write_model_dir(tiny_model(seed=2, arch="nat-drafter"), spm, tmp_path / "d")
    edited(path, lambda c: c.update(heads={"count": 2, "hidden": 8}))
    with pytest.raises(ModelDirError, match=r"config.json: heads: .*only arch \"transformer\" has proposal heads"):
        ModelDir.load(path)


def test_heads_of_another_width_are_refused(spm, tmp_path):
    """Heads trained for another d_model: the tensor and the fields are named."""
    path = write_model_dir(with_heads(tiny_model(seed=1)), spm, tmp_path / "m")
    tensors = load_file(str(path / "model.safetensors"))
    tensors["heads.2.fc2.weight"] = torch.zeros(32, HIDDEN)
    save_file(tensors, str(path / "model.safetensors"))
    edited(path, lambda c: None)
    with pytest.raises(ModelDirError, match=r"heads.2.fc2.weight: shape \[32, 24\] \(expected \[16, 24\] from "
                                            r"config.json heads.hidden 24 and d_model 16\)"):
        ModelDir.load(path)


def test_int8_heads_need_activation_scales(spm, tmp_path):
    model = with_heads(tiny_model(seed=1))
    pairs = [(s[:-1], translate(s)) for s in task_sources(16, seed=5)]
    path = write_model_dir(model, spm, tmp_path / "q", act_scales=calibrate(model, pairs), int8=True)
    edited(path, lambda c: c["quantization"]["activation_scales"].pop("heads.1.fc2"))
    with pytest.raises(ModelDirError, match="quantization.activation_scales.heads.1.fc2: missing"):
        ModelDir.load(path)


def test_checksum_covers_heads(spm, tmp_path):
    path = write_model_dir(with_heads(tiny_model(seed=1)), spm, tmp_path / "m")
    cfg = json.loads((path / "config.json").read_text())
    cfg["heads"]["hidden"] = 12  # a valid-looking value the checksum alone catches first
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelDirError, match="checksum.config: content is sha256"):
        ModelDir.load(path)
    cfg["heads"]["hidden"] = HIDDEN
    (path / "config.json").write_text(json.dumps(cfg))
    ModelDir.load(path)
    tensors = load_file(str(path / "model.safetensors"))
    tensors["heads.3.fc1.bias"][0] += 1.0
    save_file(tensors, str(path / "model.safetensors"))
    with pytest.raises(ModelDirError, match="model.safetensors: \\(content\\): content is sha256"):
        ModelDir.load(path)


# ----------------------------------------------------------------------------- writer
def test_writer_round_trip_float32(spm, tmp_path):
    model = with_heads(tiny_model(seed=3))
    path = write_model_dir(model, spm, tmp_path / "m")
    assert json.loads((path / "config.json").read_text())["heads"] == {"count": K, "hidden": HIDDEN}
    back, _ = read_model_dir(path)
    assert back.cfg.heads == (K, HIDDEN)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(back.state_dict()[name], value, rtol=0, atol=0)
    # Without heads nothing changes: no "heads" field at all.
    plain = write_model_dir(tiny_model(seed=3), spm, tmp_path / "plain")
    assert "heads" not in json.loads((plain / "config.json").read_text())


def test_writer_round_trip_int8(spm, tmp_path):
    model = with_heads(tiny_model(seed=3))
    pairs = [(s[:-1], translate(s)) for s in task_sources(32, seed=5)]
    scales = calibrate(model, pairs)
    # Every head's fc1 reads the same state: one multiplier, which the engine needs.
    assert len({scales[f"heads.{i}.fc1"] for i in range(K)}) == 1
    assert all(f"heads.{i}.fc2" in scales for i in range(K))
    path = write_model_dir(model, spm, tmp_path / "q", act_scales=scales, int8=True)
    tensors = load_file(str(path / "model.safetensors"))
    assert tensors["heads.0.fc1.weight"].dtype == torch.int8
    assert tensors["heads.0.fc1.weight_scale"].shape == (HIDDEN,)
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["quantization"]["activation_scales"]["heads.3.fc2"] == pytest.approx(scales["heads.3.fc2"])
    back, _ = read_model_dir(path)
    for i in range(K):
        for lin in ("fc1", "fc2"):
            w = model.state_dict()[f"heads.{i}.{lin}.weight"]
            step = w.abs().amax(1, keepdim=True) / 127
            assert ((back.state_dict()[f"heads.{i}.{lin}.weight"] - w).abs() <= step / 2 + 1e-7).all()
    assert NativeBackend(path, threads=1).proposal_heads == K


def test_heads_run_each_on_its_own_scale(spm, tmp_path):
    """Each head runs its own linears (a step may run only some), so their fc1 may have
    different multipliers, as any two linears may: a directory whose head 1 has twice
    the calibrated one loads, and only head 1's proposals can move."""
    model = with_heads(tiny_model(seed=3))
    pairs = [(s[:-1], translate(s)) for s in task_sources(16, seed=5)]
    scales = calibrate(model, pairs)
    same = write_model_dir(model, spm, tmp_path / "same", act_scales=dict(scales), int8=True)
    scales["heads.1.fc1"] *= 2
    other = write_model_dir(model, spm, tmp_path / "other", act_scales=scales, int8=True)
    sources = task_sources(16, seed=90)
    got = []
    for path in (same, other):
        backend = NativeBackend(path, threads=1, shortlist=False)
        state = backend.start(backend.encode(sources))
        got.append(backend.step(state, np.full((16, 1), BOS), Want(proposals=np.zeros(16, np.int64))).proposals)
    np.testing.assert_array_equal(np.delete(got[0], 1, axis=1), np.delete(got[1], 1, axis=1))


@pytest.mark.parametrize("kind", ["float32", "int8"])
def test_a_step_runs_only_the_heads_asked_for(spm, tmp_path, kind):
    """Want(heads=k): the first k heads' proposals, exactly those of a step that runs all
    K (same state, same accepted position), for the engine and the torch reference."""
    model = with_heads(tiny_verifier())
    pairs = [(s[:-1], translate(s)) for s in task_sources(32, seed=5)]
    path = write_model_dir(model, spm, tmp_path / kind, act_scales=calibrate(model, pairs) if kind == "int8" else None,
                           int8=kind == "int8")
    sources = task_sources(7, seed=41)
    truths = greedy_truth(model, sources)
    backends = [NativeBackend(path, threads=1, shortlist=False)] + ([TorchBackend(model)] if kind == "float32" else [])
    for backend in backends:
        state = backend.start(backend.encode(sources))
        first = backend.step(state, np.full((7, 1), BOS), Want(proposals=np.zeros(7, np.int64)))
        tokens = np.zeros((7, 4), dtype=np.int64)
        tokens[:, 0] = first.argmax[:, 0]
        lengths = np.array([n for n, _ in ROWS[:7]], dtype=np.int64).clip(max=3)
        for r, (_, wrong) in enumerate(ROWS[:7]):
            tokens[r, 1:] = drafts_for(truths[r][1:], 3, wrong)
        held = state.lengths.copy()
        outs = {}
        for k in (0, 1, 2, K):
            out = backend.step(state, tokens, Want(proposals=lengths, heads=k))
            outs[k] = out
            backend.truncate(state, held)
        np.testing.assert_array_equal(outs[0].proposals, outs[K].proposals)
        for k in (1, 2):
            assert outs[k].proposals.shape == (7, k)
            np.testing.assert_array_equal(outs[k].proposals, outs[K].proposals[:, :k])
            np.testing.assert_array_equal(outs[k].accepted, outs[K].accepted)
            np.testing.assert_array_equal(outs[k].argmax, outs[K].argmax)
        assert len(set(outs[K].proposals[:, 1].tolist())) > 1  # non-degenerate heads
        for bad in (-1, K + 1):
            with pytest.raises(ValueError, match=rf"Want.heads = {bad}, outside \[0, {K}\]"):
                backend.step(state, tokens, Want(proposals=lengths, heads=bad))
        assert state.lengths.tolist() == held.tolist()  # refused before anything ran
