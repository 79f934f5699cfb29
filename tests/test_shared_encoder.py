"""Models that read another model's encoder output (config.json encoder.shared): a GAD
drafter without an encoder and BiLD's little model, on the torch reference backend and
the native engine (float32 and int8), with tiny models TRAINED on the task of
export/tiny_task.py (their drafts are partly accepted, partly rejected).

- GAD with a shared-encoder drafter and lossless BiLD give exactly greedy's outputs at
  batch 1, 7 and all rows, on both verifier kinds (attention, SSRU), with and without the
  draft-or-plain policy (whose plain runs make the little model catch up in one step);
- native attach gives the torch reference's drafts (same acceptance counts in float32);
- rolling back either model's state after a rejected run continues exactly as if the
  rejected tokens had never been appended (KV caches and SSRU states);
- lossy BiLD accepts at least what lossless BiLD does; its rule on hand-made outputs;
- under the draft-or-plain policy, a one-sentence call drafts every iteration or runs
  greedy, and a batch runs as greedy where plain steps won at every batch size it passes;
- a little model or drafter whose d_model, vocabulary or encoder does not match is
  refused with the file and the field named.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_decoding_gad import check_late_drafts
from test_decoding_support import EOS, TOKENS
from test_draft_or_plain import measured

from export.calibrate import calibrate
from export.modeling import Seq2Seq
from export.tiny import random_sources, tiny_config, tiny_spm
from export.tiny_task import task_sources, trained_shared, trained_verifier, translate
from export.torch_backend import TorchBackend
from export.writer import write_model_dir
from pyfastdec.api import Translator, check_drafter
from pyfastdec.backends.base import StepOut, Want
from pyfastdec.backends.native import NativeBackend
from pyfastdec.decoding import gad, greedy
from pyfastdec.decoding.bild import accept_rollback, bild
from pyfastdec.decoding.policies import DraftOrPlain
from pyfastdec.model_dir import ModelDir, ModelDirError, encoder_digest

KINDS = ("torch", "native", "int8")


def write_pair(host: Seq2Seq, model: Seq2Seq, spm, directory):
    """{kind: (host backend, shared backend)}: torch, native float32 and native int8,
    each shared directory recording its host directory's encoder digest."""
    pairs = [(s[:-1], translate(s)) for s in task_sources(64, seed=5)]
    host_f32 = write_model_dir(host, spm, directory / "host-f32")
    host_i8 = write_model_dir(host, spm, directory / "host-i8", act_scales=calibrate(host, pairs), int8=True)
    model.cfg.encoder_shared = encoder_digest(host_f32)
    model_f32 = write_model_dir(model, spm, directory / "model-f32")
    model.cfg.encoder_shared = encoder_digest(host_i8)
    model_i8 = write_model_dir(model, spm, directory / "model-i8", act_scales=calibrate(model, pairs), int8=True)
    return {"torch": (TorchBackend(host), TorchBackend(model)),
            "native": (NativeBackend(host_f32, threads=1), NativeBackend(model_f32, threads=1)),
            "int8": (NativeBackend(host_i8, threads=1), NativeBackend(model_i8, threads=1))}


@pytest.fixture(scope="module")
def spm(tmp_path_factory):
    return tiny_spm(tmp_path_factory.mktemp("spm") / "spm.model")


@pytest.fixture(scope="module", params=["attention", "ssru"])
def drafter_pairs(request, spm, tmp_path_factory):
    return write_pair(trained_verifier(request.param), trained_shared("drafter", request.param), spm,
                      tmp_path_factory.mktemp("drafter-" + request.param))


@pytest.fixture(scope="module", params=["attention", "ssru"])
def little_pairs(request, spm, tmp_path_factory):
    return write_pair(trained_verifier(request.param), trained_shared("little", request.param), spm,
                      tmp_path_factory.mktemp("little-" + request.param))


SOURCES = random_sources(24, seed=41) + [[EOS]]


def in_batches(fn, sources, batch_size):
    outs, accepted, drafted = [], 0, 0
    for i in range(0, len(sources), batch_size):
        got, stats = fn(sources[i:i + batch_size])
        outs, accepted, drafted = outs + got, accepted + stats.accepted, drafted + stats.drafted
    return outs, accepted, drafted


# ----------------------------------------------------------------------------- GAD
@pytest.mark.parametrize("which", KINDS)
def test_gad_with_a_shared_encoder_drafter_is_greedy(drafter_pairs, which):
    verifier, drafter = drafter_pairs[which]
    assert drafter.shares_encoder
    expected, g = greedy(verifier, SOURCES)
    assert len({tuple(o) for o in expected}) >= 20  # outputs differ from source to source
    for batch_size in (1, 7, len(SOURCES)):
        outs, accepted, drafted = in_batches(lambda b: gad(verifier, drafter, b, k=4), SOURCES, batch_size)
        assert outs == expected
        assert 0 < accepted < drafted  # drafts partly accepted, partly rejected
    # The drafter never encodes (its backend refuses to): all encoder time is the verifier's.
    with pytest.raises(ValueError, match="encoder.shared|shares another"):
        drafter.encode(SOURCES[:1])


@pytest.mark.parametrize("which", ["native", "int8"])
def test_gad_attaches_late_for_the_rows_still_live(drafter_pairs, which):
    """Rows that finish in the plain steps before the first draft: the drafter attaches
    to the verifier's memory of the live rows only (check_late_drafts)."""
    verifier, drafter = drafter_pairs[which]
    check_late_drafts(verifier, drafter, SOURCES)


def test_native_attach_drafts_as_the_torch_reference(drafter_pairs):
    got = {w: gad(*drafter_pairs[w], SOURCES, k=4)[1].accepted for w in ("torch", "native")}
    assert got["torch"] == got["native"] > 0
    verifier, drafter = drafter_pairs["native"]
    t_verifier, t_drafter = drafter_pairs["torch"]
    prefixes = [[], [5, 6], [7]]
    native = drafter.draft(drafter.attach(verifier.encode(SOURCES[:3])), prefixes, 4)
    reference = t_drafter.draft(t_drafter.attach(t_verifier.encode(SOURCES[:3])), prefixes, 4)
    assert np.array_equal(native.ids, reference.ids)
    np.testing.assert_allclose(native.logprobs, reference.logprobs, atol=1e-4)


# ----------------------------------------------------------------------------- BiLD
@pytest.mark.parametrize("which", KINDS)
def test_lossless_bild_is_greedy(little_pairs, which):
    big, little = little_pairs[which]
    expected, _ = greedy(big, SOURCES)
    assert len({tuple(o) for o in expected}) >= 20
    for fallback in (0.0, 0.6):
        for batch_size in (1, 7, len(SOURCES)):
            outs, accepted, drafted = in_batches(lambda b: bild(big, little, b, fallback=fallback), SOURCES,
                                                 batch_size)
            assert outs == expected, (fallback, batch_size)
            assert 0 < accepted < drafted
    # Plain runs of the big model in between: the little model catches up in one step.
    policy = DraftOrPlain(run=2, probe_every=1)
    outs, _, _ = in_batches(lambda b: bild(big, little, b, policy=policy), SOURCES, 7)
    assert outs == expected and {"draft", "plain"} <= set(policy.chosen)


def reference_draft(big, little, src, prefix, fallback, max_draft):
    """What the little model drafts after `prefix` from a FRESH state (no cache reused):
    the whole prefix in one step, then one token per step while confident."""
    state = little.start(little.attach(big.encode([src])))
    out = little.step(state, np.array([[TOKENS["bos"]] + prefix]), Want(argmax=False, topk=1))
    draft = []
    while np.exp(out.topk_logprobs[0, -1, 0]) >= fallback:
        draft.append(int(out.topk_ids[0, -1, 0]))
        if draft[-1] == EOS or len(draft) == max_draft:
            break
        out = little.step(state, np.array([[draft[-1]]]), Want(argmax=False, topk=1))
    return draft


@pytest.mark.parametrize("which", ["torch", "int8"])
def test_the_little_model_drafts_as_from_a_fresh_state(little_pairs, which, monkeypatch):
    """The little state kept across iterations (rolled back, caught up) drafts what a
    fresh state fed the accepted output drafts: a stale position or a lost token would
    change the drafts (not the output, which the big model verifies). And rows draft the
    same at batch 7 as alone."""
    import pyfastdec.decoding.bild as bild_module

    big, little = little_pairs[which]
    records = []
    original = bild_module._LittleDrafts.propose

    def recording(self, prefixes):
        drafts = original(self, prefixes)
        records.append(([list(p) for p in prefixes], [list(d) for d in drafts]))
        return drafts

    monkeypatch.setattr(bild_module._LittleDrafts, "propose", recording)
    alone = {"drafted": 0, "accepted": 0}
    for src in SOURCES[:12]:
        records.clear()
        stats = bild(big, little, [src], fallback=0.4, max_draft=3)[1]
        alone["drafted"] += stats.drafted
        alone["accepted"] += stats.accepted
        for (prefix,), (draft,) in records:
            assert draft == reference_draft(big, little, src, prefix, 0.4, 3), (src, prefix)
    batched = bild(big, little, SOURCES[:12], fallback=0.4, max_draft=3)[1]
    assert (batched.drafted, batched.accepted) == (alone["drafted"], alone["accepted"])
    assert 0 < alone["accepted"] < alone["drafted"]
    # Two-token drafts: a fully accepted one leaves its last token to feed with the big model's (two
    # tokens to catch up), a rejected one not: rows catch up by different widths.
    monkeypatch.setattr(bild_module._LittleDrafts, "propose", original)
    one = [bild(big, little, [src], fallback=0.0, max_draft=2)[1] for src in SOURCES]
    batched = bild(big, little, SOURCES, fallback=0.0, max_draft=2)[1]
    assert (batched.drafted, batched.accepted) == (sum(s.drafted for s in one), sum(s.accepted for s in one))


def primed(cost_per_token: dict[str, float]) -> DraftOrPlain:
    """A policy whose one-sentence calls have measured these costs (warm-ups included).
    Its averages take a first measurement whole and later ones at a negligible weight, so
    the real calls' timings (this machine's) cannot move the primed choice."""
    policy = DraftOrPlain(smoothing=1e-9)
    for _ in range(2 + 2 * DraftOrPlain.EXPLORE_CALLS):
        policy.begin_call(1)
        policy.end_call(10, 10 * cost_per_token[policy.call_mode])
    return policy


@pytest.mark.parametrize("cheaper", ["draft", "plain"])
def test_bild_runs_a_one_sentence_call_in_one_mode(little_pairs, cheaper):
    """Batch 1 under the policy: a call drafts every iteration (the same iterations as
    with no policy) or none, as the measured costs of whole calls say; greedy's output."""
    big, little = little_pairs["int8"]
    policy = primed({"draft": 50e-6, "plain": 80e-6} if cheaper == "draft" else {"draft": 80e-6, "plain": 50e-6})
    for src in SOURCES[:10]:  # fewer calls than probe_every: no probe of the other mode
        outs, stats = bild(big, little, [src], fallback=0.3, policy=policy)
        assert outs == greedy(big, [src])[0]
        forced = bild(big, little, [src], fallback=0.3)[1]
        if cheaper == "draft":
            assert (stats.iterations, stats.drafted, stats.accepted) == \
                (forced.iterations, forced.drafted, forced.accepted)
        else:
            assert stats.drafted == 0 and stats.drafter_s == 0.0
    assert policy.chosen[-10:] == [cheaper] * 10


def test_a_plain_call_is_greedy_itself(little_pairs, monkeypatch):
    """A call the policy runs plain is greedy's own loop: no draft-and-verify loop, no
    little-model state, greedy's statistics."""
    import pyfastdec.decoding.bild as bild_module

    big, little = little_pairs["int8"]
    policy = primed({"draft": 80e-6, "plain": 50e-6})

    def refused(*args, **kwargs):
        raise AssertionError("a plain call ran the draft-and-verify loop")

    monkeypatch.setattr(bild_module, "draft_and_verify", refused)
    for src in SOURCES[:5]:
        outs, stats = bild(big, little, [src], fallback=0.3, policy=policy)
        expected, reference = greedy(big, [src])
        assert outs == expected and (stats.iterations, stats.generated) == (reference.iterations, reference.generated)


def test_bild_runs_a_batch_as_greedy_where_plain_steps_won_in_every_bucket(little_pairs):
    big, little = little_pairs["int8"]
    policy = DraftOrPlain(probe_every=3)
    for rows in (1, 2, 4):  # buckets of 1..7 rows: plain steps cheaper
        measured(policy, rows, draft_us=90, plain_us=60)
    plain_runs = []  # per call: plain runs the per-iteration policy measured in the 4-7 rows bucket
    for start in range(0, 21, 7):
        batch, before = SOURCES[start:start + 7], policy._bucket(7).plains
        outs, stats = bild(big, little, batch, fallback=0.3, policy=policy)
        assert outs == greedy(big, batch)[0]
        plain_runs.append(policy._bucket(7).plains - before)
        if start < 14:
            assert stats.drafted == 0 and stats.drafter_s == 0.0  # greedy itself
    assert plain_runs[:2] == [0, 0] and plain_runs[2] > 0  # every 3rd call is decided per iteration


class PlainFirst(DraftOrPlain):
    """Plain big-model steps first (some rows finish in them), then drafting only: the
    little model's state is made late, for the rows still live, and catches up on all
    they have produced."""

    def plain_steps(self, rows: int) -> int:
        self.chosen.append("plain" if not self.chosen else "draft")
        return 4 if len(self.chosen) == 1 else 0


@pytest.mark.parametrize("which", ["torch", "int8"])
def test_bild_starts_the_little_model_late_for_the_rows_still_live(little_pairs, which):
    big, little = little_pairs[which]
    expected, _ = greedy(big, SOURCES)
    assert any(len(o) < 4 for o in expected)  # some rows end inside the plain run
    outs, stats = bild(big, little, SOURCES, fallback=0.3, policy=PlainFirst())
    assert outs == expected and 0 < stats.accepted < stats.drafted


def test_bild_native_float32_accepts_what_torch_accepts(little_pairs):
    got = {w: bild(*little_pairs[w], SOURCES, fallback=0.3)[1] for w in ("torch", "native")}
    assert got["torch"].accepted == got["native"].accepted > 0
    assert got["torch"].drafted == got["native"].drafted


def test_a_higher_fallback_threshold_drafts_fewer_tokens(little_pairs):
    big, little = little_pairs["native"]
    drafted = [bild(big, little, SOURCES, fallback=f)[1].drafted for f in (0.0, 0.5, 0.95)]
    assert drafted[0] > drafted[1] > drafted[2]


@pytest.mark.parametrize("which", ["torch", "int8"])
def test_lossy_bild_accepts_at_least_what_lossless_does(little_pairs, which):
    big, little = little_pairs[which]
    expected, _ = greedy(big, SOURCES)
    accepted = [bild(big, little, SOURCES, fallback=0.3, rollback=r)[1].accepted for r in (0.0, 0.3, 2.0)]
    assert accepted[0] <= accepted[1] <= accepted[2] and accepted[0] < accepted[2]
    outs, _ = bild(big, little, SOURCES, fallback=0.3, rollback=0.3)
    assert len(outs) == len(SOURCES) and all(EOS not in o for o in outs)
    assert sum(o == e for o, e in zip(outs, expected)) >= len(SOURCES) // 2  # close to the big model


def test_accept_rollback_keeps_tokens_within_r_nats_of_the_big_model():
    ids = np.array([[[10, 11, 12]] * 3] * 3)
    logp = np.array([[[-0.2, -1.0, -2.5]] * 3] * 3, dtype=np.float32)
    drafts = np.array([[10, 11], [12, 10], [13, 10]])
    out = StepOut(topk_ids=ids, topk_logprobs=logp)
    j, nxt = accept_rollback(1.5)(out, drafts, np.array([2, 2, 2]))
    # 11 is 1.0 nats from certainty: kept; 12 is 2.5: rolled back; 13 is not in the top-k.
    assert j.tolist() == [2, 0, 0] and nxt.tolist() == [10, 10, 10]
    j, _ = accept_rollback(3.0)(out, drafts, np.array([2, 2, 2]))
    assert j.tolist() == [2, 2, 0]


def test_bild_refuses_bad_thresholds(little_pairs):
    big, little = little_pairs["torch"]
    for kw in ({"fallback": 1.5}, {"fallback": -0.1}, {"rollback": 5.0}, {"max_draft": 0}):
        with pytest.raises(ValueError, match="BiLD"):
            bild(big, little, SOURCES[:2], **kw)
    with pytest.raises(ValueError, match="little model"):
        bild(big, big, SOURCES[:2])  # the big model has its own encoder


# ----------------------------------------------------------------------------- roll-back
@pytest.mark.parametrize("which", KINDS)
def test_rolled_back_states_continue_as_if_the_rejected_tokens_never_came(little_pairs, which):
    """After tokens are appended and truncated away, both models' next outputs equal
    those of a state that only ever held the kept tokens (little: SSRU or attention
    cache; big: the other kind)."""
    big, little = little_pairs[which]
    src = SOURCES[:3]
    memory = big.encode(src)
    for model, mem in ((big, memory), (little, little.attach(memory))):
        kept = np.array([[TOKENS["bos"], 9, 12], [TOKENS["bos"], 7, 7], [TOKENS["bos"], 20, 5]])
        rejected = np.array([[30, 31, 32], [6, 6, 6], [11, 10, 9]])
        nxt = np.array([[14], [15], [16]])
        want = Want(argmax=True, topk=3)
        clean = model.start(mem)
        model.step(clean, kept, want)
        expected = model.step(clean, nxt, want)
        rolled = model.start(mem)
        model.step(rolled, np.concatenate([kept, rejected], axis=1), want)
        rolled = model.truncate(rolled, np.array([3, 3, 3]))
        got = model.step(rolled, nxt, want)
        assert np.array_equal(got.argmax, expected.argmax)
        assert np.array_equal(got.topk_ids, expected.topk_ids)
        np.testing.assert_allclose(got.topk_logprobs, expected.topk_logprobs, atol=1e-5)


# ----------------------------------------------------------------------------- bad input
def copy_with_config(src, dst, **changes):
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    for key, value in changes.items():
        target = config
        *path, last = key.split(".")
        for part in path:
            target = target[part]
        target[last] = value
    del config["checksum"]  # optional (hand-edited directories): the loader checks the fields themselves
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    return dst


def test_a_little_model_over_another_encoder_is_refused(little_pairs, tmp_path):
    big, little = little_pairs["native"]
    other, _ = little_pairs["int8"]  # the same encoder quantised: another digest
    with pytest.raises(ModelDirError, match=r"config\.json: encoder\.shared: .* is not the encoder of"):
        check_drafter(other.model_dir, little.model_dir)
    check_drafter(big.model_dir, little.model_dir)  # its own host: accepted
    wrong = copy_with_config(little.model_dir.path, tmp_path / "wrong", **{"encoder.shared": "sha256:" + "ab" * 32})
    with pytest.raises(ModelDirError, match="encoder.shared"):
        check_drafter(big.model_dir, ModelDir.load(wrong))


def test_a_host_whose_encoder_differs_only_in_its_embedding_is_refused(drafter_pairs, tmp_path):
    """The embedding feeds the encoder: a host whose encoder layers are byte for byte the
    drafter's host's, but whose embedding differs, gives other encoder outputs and is
    refused. The drafter records the digest computed here, now, so the refusal comes from
    what the digest covers, not from a digest stored under another formula."""
    from pyfastdec.model_dir import safetensors_io

    verifier, drafter = drafter_pairs["native"]
    host = Path(shutil.copytree(verifier.model_dir.path, tmp_path / "host"))
    shared = copy_with_config(drafter.model_dir.path, tmp_path / "drafter", **{"encoder.shared": encoder_digest(host)})
    check_drafter(ModelDir.load(host), ModelDir.load(shared))  # its host: accepted
    tensors = {name: np.array(t) for name, t in ModelDir.load(host).tensors.items()}
    tensors["embed.weight"][7] *= -2.0  # one token's row (float32 weights)
    safetensors_io.save_file(host / "model.safetensors", tensors, metadata={"format": "fastdec", "version": "1"})
    config = json.loads((host / "config.json").read_text())
    del config["checksum"]
    (host / "config.json").write_text(json.dumps(config, indent=2))
    changed = ModelDir.load(host)
    assert all(np.array_equal(changed.tensors[n], verifier.model_dir.tensors[n])
               for n in changed.tensors if n.startswith("encoder."))
    source = [[7, 9, EOS]]  # token 7's row changed: the drafter would read another encoder output
    before = drafter.draft(drafter.attach(verifier.encode(source)), [[]], 4).logprobs
    after = drafter.draft(drafter.attach(NativeBackend(changed, threads=1).encode(source)), [[]], 4).logprobs
    assert not np.allclose(before, after, atol=1e-3)
    with pytest.raises(ModelDirError, match=r"drafter/config\.json: encoder\.shared: .* is not the encoder of"):
        check_drafter(changed, ModelDir.load(shared))


def test_a_little_model_of_another_width_or_vocabulary_is_refused(little_pairs, tmp_path):
    big, little = little_pairs["native"]
    wide = Seq2Seq(tiny_config())
    wide_cfg = wide.cfg
    wide_cfg.encoder_layers, wide_cfg.encoder_shared, wide_cfg.decoder_layers = [], encoder_digest(
        big.model_dir.path), wide_cfg.decoder_layers[:1]
    wide_cfg.d_model, wide_cfg.head_dim = 32, 8
    wide_dir = write_model_dir(Seq2Seq(wide_cfg), little.model_dir.spm_path, tmp_path / "wide")
    with pytest.raises(ModelDirError, match=r"wide/config\.json: d_model: 32 differs from 16"):
        check_drafter(big.model_dir, ModelDir.load(wide_dir))
    with pytest.raises(ValueError, match="holds no encoder output of width 32"):
        NativeBackend(wide_dir, threads=1).attach(big.encode(SOURCES[:1]))
    vocab_cfg = tiny_config(vocab_size=44)
    vocab_cfg.encoder_layers, vocab_cfg.encoder_shared = [], encoder_digest(big.model_dir.path)
    spm44 = tiny_spm(tmp_path / "spm44.model", vocab_size=44)
    vocab_dir = write_model_dir(Seq2Seq(vocab_cfg), spm44, tmp_path / "vocab")
    with pytest.raises(ModelDirError, match=r"vocab/config\.json: vocab_size: 44 differs from 40"):
        check_drafter(big.model_dir, ModelDir.load(vocab_dir))


def test_config_fields_of_shared_encoders_are_checked(little_pairs, tmp_path):
    _, little = little_pairs["native"]
    path = little.model_dir.path
    for change, field in (({"encoder.shared": "sha1:00"}, "encoder.shared"),
                          ({"encoder.layers": [{"heads": 2, "ffn": 8}]}, "encoder.layers"),
                          ({"decoding": {"fallback": 0.5}}, "decoding.lossy_fallback"),
                          ({"decoding": {"fallback": 1.5, "lossy_fallback": 0.5, "rollback": 1.0}},
                           "decoding.fallback")):
        bad = copy_with_config(path, tmp_path / field.replace(".", "_") / "m", **change)
        with pytest.raises(ModelDirError, match=field.replace(".", r"\.")):
            NativeBackend(bad, threads=1)
    good = copy_with_config(path, tmp_path / "good",
                            decoding={"fallback": 0.4, "lossy_fallback": 0.3, "rollback": 1.5})
    assert NativeBackend(good, threads=1).config.bild == {"fallback": 0.4, "lossy_fallback": 0.3, "rollback": 1.5}
    with pytest.raises(ModelDirError, match="no encoder of its own"):
        Translator(path)  # a little model is not a model to translate with


def test_a_slimmed_little_model_keeps_its_strongest_heads_and_units():
    """export.train_shared --shape HEADS,FFN: the host layer's largest-norm heads and FFN
    units, the rest of the layer as it was, still attached to the host."""
    import torch

    from export.prune_groups import group_sets
    from export.train_shared import slimmed

    little = trained_shared("little", "ssru")  # an attention layer of 4 heads, FFN 16
    assert (little.cfg.decoder_layers[0].heads, little.cfg.decoder_layers[0].ffn) == (4, 16)
    sets = {gs.kind: gs for gs in group_sets(little)}
    heads = sets["dec_heads"].norms().argsort(descending=True)[:2].sort().values
    units = sets["dec_ffn"].norms().argsort(descending=True)[:8].sort().values
    slim = slimmed(little, "2,8")
    assert (slim.cfg.decoder_layers[0].heads, slim.cfg.decoder_layers[0].ffn) == (2, 8) and slim.host is little.host
    hd = little.cfg.head_dim
    rows = (heads[:, None] * hd + torch.arange(hd)).flatten()
    old, new = little.decoder.layers[0], slim.decoder.layers[0]
    assert torch.equal(new.cross_attn.q.weight, old.cross_attn.q.weight[rows])
    assert torch.equal(new.self_attn.o.weight, old.self_attn.o.weight[:, rows])
    assert torch.equal(new.ffn.fc1.weight, old.ffn.fc1.weight[units])
    assert torch.equal(new.ln_cross.weight, old.ln_cross.weight)
    assert slimmed(little, "0,0") is little
