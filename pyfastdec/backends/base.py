"""The Backend protocol every decoding strategy is written against (pure numpy).

A backend holds one model (verifier, student or drafter). Strategies only call the
methods below, so a new backend (native int8 engine, torch reference, onnxruntime, the
CUDA GPU model of cuda.py) gets every strategy for free, and the torch backend can check
every strategy against the native one.

Decoder positions and the "pending" token
-----------------------------------------
Position 0 of every target sequence is BOS. A State holds the decoder positions already
run through the model; `lengths[b]` is how many positions row b holds, BOS INCLUDED.
`start(memory)` returns a state holding no positions yet (lengths 0), positioned at BOS:
the first `step` of every row feeds BOS itself. `step(state, tokens[rows, n])` appends
the n tokens at positions lengths[b] .. lengths[b]+n-1 and returns, for each of them, the
distribution of the token that FOLLOWS it. So
  greedy:     step([[BOS]]) -> y1; step([[y1]]) -> y2; ...            (n = 1)
  verify:     with accepted prefix BOS y1..ym held up to y(m-1), step([[ym, d1..dk]])
              scores d1..dk and gives a bonus prediction after dk         (n = k + 1)
  roll back:  truncate(state, lengths) keeps the first lengths[b] positions of row b
              (BOS included), e.g. m + 1 + j after accepting j draft tokens; positions
              past it leave no trace in later steps.
`lengths` may differ per row; rows never wait for each other.

Proposal heads (blockwise parallel decoding)
--------------------------------------------
A model directory may carry K proposal heads (config.json "heads"; the backend's
`proposal_heads` is K, 0 without). Head i reads the decoder's final hidden state s at a
position (the vector the output layer reads) and proposes the token i+1 places AFTER
that position's own argmax y: at the position that predicts y, the heads give the K
tokens that would follow y. A step asked for `Want(proposals=lengths)` treats
tokens[:, 1:1+lengths[b]] as row b's draft (tokens[:, 0] is the pending token, the rest
padding), finds j[b] = how many leading draft tokens equal the argmax of the position
before them (draft_verify.accept_argmax), and runs the heads at position j[b] only:
  StepOut.accepted  [rows]     j, the accepted draft length
  StepOut.proposals [rows, K]  the heads' tokens at position j, i.e. the K tokens after
                               argmax[:, j] (the verifier's own token there); with
                               Want(heads=k), only the first k heads run: [rows, k]
So one step verifies the previous block and proposes the next one; the caller keeps
BOS .. pending d1..dj (truncate to lengths + 1 + j) and feeds [argmax[j], proposals..].
Lengths of 0 (e.g. the first step, tokens [[BOS]]) give the block after the first token.
A backend whose model has no heads (`proposal_heads == 0`, also a backend that cannot run
heads a config declares, such as onnx) raises ValueError naming the model directory.

Capabilities: required and optional
-----------------------------------
`Backend` lists what every strategy calls. What only some models can do is declared
on `BackendBase` with a default that means "cannot" (no-op, None, 0 or False), so
strategies read a capability instead of probing for it:
  arch, block_size   "transformer" | "nat-drafter"; the drafter's block (else None)
  proposal_heads     K proposal heads (0: none; Want.proposals is refused)
  shares_encoder     no encoder of its own (config.json encoder.shared): its Memory
                     comes from attach(host memory), and encode refuses
  attach(memory)     a shared-encoder model's Memory of the host model's rows: the
                     host's encoder output, read by this model's cross-attention (GAD's
                     shared drafter, BiLD's little model); one encoder pass serves both
  draft(...)         drafters only (arch "nat-drafter")
  draft_greedy       None, or a method running BiLD's little-model drafting loop in one
                     call (decoding/bild.py runs the same loop over `step` otherwise):
                     draft_greedy(state, tokens, widths, max_new, min_logprob) ->
                     (drafts [rows, max_new], -1 past each row's count; counts [rows];
                     fed [rows], drafted tokens fed to the state)
  encode_full_vocabulary(src_ids) -> Memory: encode with no shortlist, so that every
                     id gets its log-prob (scoring given targets); without
                     shortlists it is encode
  release_scratch(keep_bytes=None) -> bytes freed: drop scratch memory kept between
                     calls beyond keep_bytes (0: nothing kept, nothing done)
  scratch_bytes() -> bytes of that scratch (0: none kept)
  model_dir          the ModelDir the model was loaded from (errors name its path), or None
Wrappers that add behaviour to another backend (decoding/prefix.py's PrefixedBackend,
decoding/logit_rules.py's RuledBackend) are not BackendBase subclasses: every capability
they do not override is the wrapped backend's (delegated), which defaults here would hide.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

Memory = Any  # backend-specific encoder output for a batch of rows
State = Any  # backend-specific decoder state (KV caches / SSRU states + lengths)


@dataclass(frozen=True)
class Want:
    """What `step` should return for every appended position.

    argmax:   the top-1 id                                  -> StepOut.argmax [rows, n]
    topk:     k > 0: the k best ids and their log-probs     -> StepOut.topk_ids / topk_logprobs [rows, n, k]
    ids:      int array [rows, n]: log-prob of these ids    -> StepOut.id_logprobs [rows, n]
              (e.g. the draft tokens: ids[:, i] is scored at position i, so for
              verification pass the tokens shifted left by one)
    logprobs: the full log-softmax over the vocabulary      -> StepOut.logprobs [rows, n, V]
    logits:   the raw output-layer logits (-inf outside     -> StepOut.logits [rows, n, V]
              the shortlist): CTranslate2's logits processors (repetition penalty)
              edit logits, whose sign the log-softmax loses (decoding/logit_rules.py)
    proposals: int64 array [rows]: draft tokens per row     -> StepOut.proposals [rows, K],
              (tokens[:, 1:1+proposals[b]]; needs argmax)      StepOut.accepted [rows]
    keep_ids: int array [rows, n] (needs argmax): the token each position would keep (a
              correction model's source token there, -1: none); the argmax becomes it
              unless the top-1 beats its log-prob by at least `edit_margin` (>= 0; 0 leaves
              the argmax alone). Only argmax changes (and the proposals' accepted length,
              which is found from it); topk, ids and logprobs stay the model's.
    heads: with proposals, run only the first `heads` heads (0: all K) -> proposals [rows, heads];
              a caller that will verify k proposals next needs k (each head costs work)
              the proposal heads' block at each row's accepted position (module
              docstring, "Proposal heads"); models without heads raise ValueError
    Log-probs are natural-log softmax over the full output layer (or the shortlist, if
    the backend uses one; ids outside it get -inf).
    """

    argmax: bool = True
    topk: int = 0
    ids: np.ndarray | None = None
    logprobs: bool = False
    logits: bool = False
    proposals: np.ndarray | None = None  # int64 [rows]: drafted tokens per row -> StepOut.proposals / accepted
    heads: int = 0  # with proposals: how many heads run (0: all K)
    keep_ids: np.ndarray | None = None  # int64 [rows, n]: kept token per position (-1: none)
    edit_margin: float = 0.0  # an edit must beat the kept token's log-prob by this much


@dataclass
class StepOut:
    """Per-position results of one `step`; fields not asked for are None."""

    argmax: np.ndarray | None = None  # int64   [rows, n]
    topk_ids: np.ndarray | None = None  # int64   [rows, n, k], best first
    topk_logprobs: np.ndarray | None = None  # float32 [rows, n, k]
    id_logprobs: np.ndarray | None = None  # float32 [rows, n]
    logprobs: np.ndarray | None = None  # float32 [rows, n, V]
    logits: np.ndarray | None = None  # float32 [rows, n, V]
    proposals: np.ndarray | None = None  # int64   [rows, K or Want.heads]: the heads' tokens at the accepted position
    accepted: np.ndarray | None = None  # int64   [rows]: j, leading draft tokens equal to the argmax


def step_out(out: dict) -> StepOut:
    """A StepOut from an engine step's dict (the native and GPU engines' bindings return
    the fields asked for under StepOut's names; the others are None). Unpacked as it is,
    once per decoder call without a pass over dataclasses.fields: a key a binding adds
    without a StepOut field fails at once."""
    return StepOut(**out)


@dataclass
class Draft:
    """A drafter's block proposal: k ids per row and their drafter log-probs."""

    ids: np.ndarray  # int64   [rows, k]
    logprobs: np.ndarray  # float32 [rows, k]


@runtime_checkable
class Backend(Protocol):
    """One model behind the calls every decoding strategy uses.

    Attributes: `tokens` = {"pad", "unk", "bos", "eos", "mask"} ids, `vocab_size`,
    `arch` ("transformer" or "nat-drafter"), `block_size` (drafters; else None); the
    optional capabilities (module docstring) are BackendBase's.
    Source ids given to `encode` are sentencepiece ids followed by EOS.
    """

    tokens: dict[str, int]
    vocab_size: int
    arch: str
    block_size: int | None

    def encode(self, src_ids: list[list[int]]) -> Memory:
        """Run the encoder over a batch (one row per source)."""

    def start(self, memory: Memory) -> State:
        """A decoder state with no positions for every row of `memory`; feed BOS first."""

    def step(self, state: State, tokens: np.ndarray, want: Want) -> StepOut:
        """Append tokens [rows, n] to every row in ONE causal pass; results per position."""

    def truncate(self, state: State, lengths: np.ndarray) -> State:
        """Keep the first lengths[b] positions (BOS included) of row b; returns `state`."""

    def select(self, state_or_memory: State | Memory, rows: np.ndarray) -> State | Memory:
        """A new state (or memory) holding only the given rows, in the given order."""

    def draft(self, memory: Memory, prefix: list[list[int]], k: int) -> Draft:
        """Drafters only: the next k tokens after each row's accepted prefix (no BOS)."""


class BackendBase:
    """The optional capabilities (module docstring, "Capabilities"), each at the default
    that means "this model cannot": a backend subclasses it, implements the Backend
    calls, and overrides what its model can do."""

    arch: str = "transformer"
    block_size: int | None = None
    proposal_heads: int = 0
    shares_encoder: bool = False
    model_dir: Any = None  # pyfastdec.model_dir.ModelDir, where loaded from one
    draft_greedy: Any = None  # a method where the backend runs BiLD's drafting loop itself

    def _read_model_dir(self, model_dir: Any) -> None:
        """The attributes a backend over a loaded model directory exposes (the engines read
        the rest of it themselves)."""
        cfg = model_dir.config
        self.model_dir, self.config = model_dir, cfg
        self.tokens = dict(cfg.tokens)
        self.vocab_size = cfg.vocab_size
        self.arch = cfg.arch
        self.block_size = cfg.block_size
        self.proposal_heads = cfg.heads.count if cfg.heads else 0  # K; 0: Want.proposals is refused
        # No encoder of its own: memory comes from attach(the host's memory), not encode.
        self.shares_encoder = cfg.encoder_shared is not None

    def attach(self, host_memory: Memory) -> Memory:
        """A shared-encoder model's Memory of the host's rows (shares_encoder only)."""
        raise ValueError(f"attach: {self.describe()} has its own encoder (config.json encoder.shared is absent); "
                         f"use encode")

    def draft(self, memory: Memory, prefix: list[list[int]], k: int | None = None) -> Draft:
        """Drafters only (arch "nat-drafter"): the next k tokens after each row's prefix."""
        raise ValueError(f"draft: {self.describe()} is not a drafter (arch {self.arch!r})")

    def encode_full_vocabulary(self, src_ids: list[list[int]]) -> Memory:
        """encode without a shortlist: a backend that has none encodes as encode does."""
        return self.encode(src_ids)

    def release_scratch(self, keep_bytes: int | None = None) -> int:
        """Frees scratch kept between calls beyond keep_bytes; returns the bytes freed."""
        return 0

    def scratch_bytes(self) -> int:
        """Bytes of scratch kept between calls."""
        return 0

    def truncate(self, state: State, lengths: np.ndarray) -> State:
        """For backends over an engine model (self._model) whose truncate takes int64
        lengths and rolls the state back in place; others override it."""
        self._model.truncate(state, np.ascontiguousarray(lengths, dtype=np.int64))
        return state

    def _require_ar(self, what: str):
        if self.arch != "transformer":
            raise ValueError(f"{what}: a {self.arch!r} model has no incremental decoder; use draft()")

    def describe(self) -> str:
        """What errors call this model: its directory, else its class."""
        return str(self.model_dir.path) if self.model_dir is not None else type(self).__name__
