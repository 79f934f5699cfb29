"""PyTorch reference models for pyfastdec, with per-layer shapes.

Two architectures share one set of building blocks:
- "transformer": AT encoder-decoder; decoder self-attention is multi-head attention or an
  SSRU (simpler simple recurrent unit), used by the verifier / teacher / students.
- "nat-drafter": the GAD block drafter; its decoder sees BOS + accepted prefix + k <mask>
  tokens, prefix positions attend causally, mask positions attend to everything, and the
  k mask positions predict the next k target tokens at once.

Parameter names (state_dict keys) are exactly the tensor names of export/FORMAT.md, so
the writer dumps the state_dict as is. Every layer's head count and FFN size come from
the config, so pruned models (different sizes per layer) load without special cases.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .decoder_cache import DecoderCache, LayerCache

NEG_INF = float("-inf")
# FFN activations (config.json "activation"): swish = SiLU; gelu = the exact erf form.
ACTIVATIONS = {"relu": torch.relu, "swish": F.silu, "gelu": F.gelu}


# ----------------------------------------------------------------------------- config
@dataclass
class LayerSpec:
    heads: int
    ffn: int


@dataclass
class ModelConfig:
    """Everything config.json records about the network (see export/FORMAT.md)."""

    arch: str = "transformer"  # "transformer" | "nat-drafter"
    d_model: int = 256
    head_dim: int = 64
    vocab_size: int = 8000
    norm: str = "pre"  # "pre" | "post"
    activation: str = "relu"
    encoder_layers: list[LayerSpec] = field(default_factory=list)
    decoder_layers: list[LayerSpec] = field(default_factory=list)
    decoder_self: str = "attention"  # "attention" | "ssru"
    tokens: dict = field(default_factory=lambda: {"pad": 0, "unk": 1, "bos": 2, "eos": 3, "mask": 4})
    max_source_len: int = 256
    block_size: int | None = None  # drafter only: k
    quantization: dict | None = None
    heads: tuple[int, int] | None = None  # proposal heads: (count K, hidden H), or None
    # Optional config.json fields for models trained elsewhere; written only when not default.
    layer_norm_eps: float = 1e-5
    positions: str = "interleaved"  # "interleaved" | "halves" (HF Marian) | "marian" (Marian C++)
    suppress: list = field(default_factory=list)  # ids never generated (logit -inf)
    tokenizer: str = "spm"  # "spm" (spm.model) | "marian" (source.spm, target.spm, vocab.json)
    # A decoder that reads another model's encoder output has no encoder of its own: this
    # names that encoder ("sha256:...", pyfastdec.model_dir.encoder_digest of its host).
    encoder_shared: str | None = None

    def __post_init__(self):
        self.encoder_layers = [l if isinstance(l, LayerSpec) else LayerSpec(**l) for l in self.encoder_layers]
        self.decoder_layers = [l if isinstance(l, LayerSpec) else LayerSpec(**l) for l in self.decoder_layers]
        if self.arch not in ("transformer", "nat-drafter"):
            raise ValueError(f"arch {self.arch!r} is not 'transformer' or 'nat-drafter'")
        if self.norm not in ("pre", "post"):
            raise ValueError(f"norm {self.norm!r} is not 'pre' or 'post'")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation {self.activation!r} is not one of {', '.join(ACTIVATIONS)}")
        if self.positions not in ("interleaved", "halves", "marian"):
            raise ValueError(f"positions {self.positions!r} is not 'interleaved', 'halves' or 'marian'")
        if self.tokenizer not in ("spm", "marian"):
            raise ValueError(f"tokenizer {self.tokenizer!r} is not 'spm' or 'marian'")
        self.suppress = [int(i) for i in self.suppress]
        if self.encoder_shared is not None and self.encoder_layers:
            raise ValueError("encoder: a shared encoder (encoder.shared) has no layers of its own")
        if self.decoder_self not in ("attention", "ssru"):
            raise ValueError(f"decoder self {self.decoder_self!r} is not 'attention' or 'ssru'")
        if self.arch == "nat-drafter":
            if self.decoder_self != "attention":
                raise ValueError("nat-drafter needs an attention decoder (the block is bidirectional)")
            if not self.block_size or self.block_size < 1:
                raise ValueError("nat-drafter needs block_size >= 1")
        if self.heads is not None:
            self.heads = tuple(self.heads)
            if len(self.heads) != 2 or any(not isinstance(v, int) or v < 1 for v in self.heads):
                raise ValueError(f"heads {self.heads!r} is not (count >= 1, hidden >= 1)")
            if self.arch != "transformer":
                raise ValueError("proposal heads ride on an autoregressive 'transformer', not a drafter")

    @classmethod
    def create(cls, d_model, heads, ffn, enc_layers, dec_layers, head_dim=None, **kw) -> "ModelConfig":
        """Uniform shapes: every layer with `heads` heads and FFN size `ffn`."""
        spec = lambda: LayerSpec(heads, ffn)  # noqa: E731
        return cls(d_model=d_model, head_dim=head_dim or d_model // heads,
                   encoder_layers=[spec() for _ in range(enc_layers)],
                   decoder_layers=[spec() for _ in range(dec_layers)], **kw)

    def to_json(self) -> dict:
        out = {
            "format": "fastdec", "version": 1, "arch": self.arch,
            "d_model": self.d_model, "head_dim": self.head_dim, "vocab_size": self.vocab_size,
            "norm": self.norm, "activation": self.activation,
            "encoder": {"layers": [asdict(l) for l in self.encoder_layers]},
            "decoder": {"self": self.decoder_self, "layers": [asdict(l) for l in self.decoder_layers]},
            "tokens": dict(self.tokens), "max_source_len": self.max_source_len,
        }
        if self.encoder_shared is not None:
            out["encoder"]["shared"] = self.encoder_shared
        if self.arch == "nat-drafter":
            out["block_size"] = self.block_size
        out["quantization"] = self.quantization
        if self.heads is not None:  # absent, not null, without heads: older directories stay byte-identical
            out["heads"] = {"count": self.heads[0], "hidden": self.heads[1]}
        for name, default in OPTIONAL_FIELDS.items():  # likewise absent at their defaults
            if getattr(self, name) != default:
                out[name] = getattr(self, name)
        return out

    @classmethod
    def from_json(cls, obj: dict, where: str = "config.json") -> "ModelConfig":
        if obj.get("format") != "fastdec":
            raise ValueError(f"{where}: field 'format' is {obj.get('format')!r}, expected 'fastdec'")
        if obj.get("version") != 1:
            raise ValueError(f"{where}: field 'version' is {obj.get('version')!r}; this reader knows version 1")
        heads = obj.get("heads")
        try:
            if heads is not None:
                heads = (heads["count"], heads["hidden"])
            return cls(
                arch=obj["arch"], d_model=obj["d_model"], head_dim=obj["head_dim"],
                vocab_size=obj["vocab_size"], norm=obj["norm"], activation=obj["activation"],
                encoder_layers=obj["encoder"]["layers"], decoder_layers=obj["decoder"]["layers"],
                decoder_self=obj["decoder"]["self"], tokens=obj["tokens"],
                max_source_len=obj["max_source_len"], block_size=obj.get("block_size"),
                quantization=obj.get("quantization"), heads=heads, encoder_shared=obj["encoder"].get("shared"),
                **{name: obj.get(name, default) for name, default in OPTIONAL_FIELDS.items()},
            )
        except KeyError as err:
            raise ValueError(f"{where}: missing field {err}") from None
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {err}") from None

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)


OPTIONAL_FIELDS = {"layer_norm_eps": 1e-5, "positions": "interleaved", "suppress": [], "tokenizer": "spm"}


# ----------------------------------------------------------------------------- helpers
def fast_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout with a cheap mask.

    torch's CPU dropout draws one random number per element and took ~38% of a training
    step here; drawing int64 words and reading them as 8 random bytes is ~10x cheaper.
    p is quantised to 1/256, which is irrelevant for regularisation.
    """
    if not training or p <= 0.0:
        return x
    if x.device.type != "cpu":  # the byte trick is a CPU cost; an accelerator's own dropout is cheap
        return F.dropout(x, p, True)
    n = x.numel()
    words = torch.empty((n + 7) // 8, dtype=torch.int64).random_(-(2**63), 2**63 - 1)
    keep = words.view(torch.uint8)[:n].view(x.shape) >= int(round(p * 256))
    return x * keep.to(x.dtype).mul_(1.0 / (1.0 - p))


def sinusoidal_positions(positions: torch.Tensor, d_model: int, layout: str = "interleaved") -> torch.Tensor:
    """PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d)); any shape of p.

    layout "halves" (Hugging Face Marian): PE[p, i] = sin(p / 10000^(2i/d)) and
    PE[p, d/2 + i] = cos(same), in float64 as its numpy table. "marian" (Marian C++):
    the same halves with frequency exp(-i ln(10000) / (d/2 - 1)), in float32."""
    if layout != "interleaved":
        half = d_model // 2
        i = torch.arange(half, dtype=torch.float64 if layout == "halves" else torch.float32)
        if layout == "halves":
            angle = positions.to(torch.float64).unsqueeze(-1) / torch.pow(10000.0, 2.0 * i / d_model)
        else:
            increment = torch.log(torch.tensor(10000.0)) / (half - 1.0)
            angle = positions.to(torch.float32).unsqueeze(-1) * torch.exp(i * -increment)
        return torch.cat([angle.sin(), angle.cos()], dim=-1).to(torch.float32)
    i = torch.arange(0, d_model, 2, dtype=torch.float32, device=positions.device)
    inv = torch.exp(-math.log(10000.0) * i / d_model)
    angle = positions.to(torch.float32).unsqueeze(-1) * inv
    pe = torch.stack([angle.sin(), angle.cos()], dim=-1)  # interleave sin/cos
    return pe.flatten(-2)


class MultiHeadAttention(nn.Module):
    """q/k/v/o projections with heads*head_dim inner size; attention as plain matmuls.

    Plain matmuls instead of scaled_dot_product_attention: the bf16 flash-attention
    backward took 43% of a CPU training step.
    """

    def __init__(self, d_model: int, heads: int, head_dim: int, dropout: float = 0.0):
        super().__init__()
        inner = heads * head_dim
        self.heads, self.head_dim, self.dropout = heads, head_dim, dropout
        self.q = nn.Linear(d_model, inner)
        self.k = nn.Linear(d_model, inner)
        self.v = nn.Linear(d_model, inner)
        self.o = nn.Linear(inner, d_model)

    def split(self, x: torch.Tensor) -> torch.Tensor:  # [B,T,H*hd] -> [B,H,T,hd]
        return x.view(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.split(self.k(x)), self.split(self.v(x))

    def attend(self, q_in: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """q_in [B,Tq,d]; k,v [B,H,Tk,hd]; mask bool broadcastable to [B,H,Tq,Tk], True = may attend."""
        q = self.split(self.q(q_in)) * (self.head_dim ** -0.5)
        scores = torch.matmul(q, k.transpose(-1, -2)).float().masked_fill(~mask, NEG_INF)
        probs = fast_dropout(scores.softmax(-1), self.dropout, self.training).to(v.dtype)
        ctx = torch.matmul(probs, v).transpose(1, 2).flatten(2)
        return self.o(ctx)

    def forward(self, q_in, kv_in, mask):
        k, v = self.project_kv(kv_in)
        return self.attend(q_in, k, v, mask)


class SSRU(nn.Module):
    """x_t = W in_t; f_t = sigmoid(W_f in_t + b_f); c_t = f_t c_{t-1} + (1-f_t) x_t; h_t = ReLU(c_t)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.w = nn.Linear(d_model, d_model, bias=False)
        self.wf = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, c0: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B,T,d] -> (h [B,T,d], c [B,T,d]); c0 [B,d] is the state before x (zeros if None)."""
        if self.w._forward_pre_hooks or self.wf._forward_pre_hooks:
            # Calibration / simulated int8 hooks must see each linear's own call.
            xw, fz = self.w(x).float(), self.wf(x).float()
        else:
            # Both projections as one GEMM over the whole sequence; only the scan is sequential.
            weight = torch.cat([self.w.weight, self.wf.weight], 0)
            bias = torch.cat([torch.zeros_like(self.wf.bias), self.wf.bias], 0)
            xw, fz = F.linear(x, weight, bias).float().chunk(2, dim=-1)
        f = torch.sigmoid(fz)
        u = (1.0 - f) * xw
        c = torch.zeros_like(xw[:, 0]) if c0 is None else c0.float()
        out = []
        for t in range(x.shape[1]):  # ~30 steps in training; a cumprod form loses precision
            c = f[:, t] * c + u[:, t]
            out.append(c)
        cs = torch.stack(out, 1)
        return torch.relu(cs).to(x.dtype), cs


class FFN(nn.Module):
    def __init__(self, d_model: int, ffn: int, act_dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        self.fc1 = nn.Linear(d_model, ffn)
        self.fc2 = nn.Linear(ffn, d_model)
        self.act_dropout = act_dropout
        self.act = ACTIVATIONS[activation]

    def forward(self, x):
        return self.fc2(fast_dropout(self.act(self.fc1(x)), self.act_dropout, self.training))


class Sublayer:
    """Residual + layer norm around a sublayer, pre- or post-norm."""

    @staticmethod
    def run(x, ln: nn.LayerNorm, fn, pre: bool, dropout: float, training: bool):
        if pre:
            return x + fast_dropout(fn(ln(x)), dropout, training)
        return ln(x + fast_dropout(fn(x), dropout, training))


# ----------------------------------------------------------------------------- layers
class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, spec: LayerSpec, dropout: float, attn_dropout: float, act_dropout: float):
        super().__init__()
        d = cfg.d_model
        self.self_attn = MultiHeadAttention(d, spec.heads, cfg.head_dim, attn_dropout)
        self.ln_attn = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.ffn = FFN(d, spec.ffn, act_dropout, cfg.activation)
        self.ln_ffn = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.pre, self.dropout = cfg.norm == "pre", dropout

    def forward(self, x, mask):
        x = Sublayer.run(x, self.ln_attn, lambda h: self.self_attn(h, h, mask), self.pre, self.dropout, self.training)
        return Sublayer.run(x, self.ln_ffn, self.ffn, self.pre, self.dropout, self.training)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, spec: LayerSpec, dropout: float, attn_dropout: float, act_dropout: float):
        super().__init__()
        d = cfg.d_model
        if cfg.decoder_self == "ssru":
            self.ssru = SSRU(d)
        else:
            self.self_attn = MultiHeadAttention(d, spec.heads, cfg.head_dim, attn_dropout)
        self.ln_self = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.cross_attn = MultiHeadAttention(d, spec.heads, cfg.head_dim, attn_dropout)
        self.ln_cross = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.ffn = FFN(d, spec.ffn, act_dropout, cfg.activation)
        self.ln_ffn = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.pre, self.dropout = cfg.norm == "pre", dropout
        self.uses_ssru = cfg.decoder_self == "ssru"

    def forward(self, x, self_mask, cross_kv, cross_mask, cache: "LayerCache | None" = None):
        """x [B,T,d]. Without cache: full sequence (self_mask [.,T,T]). With cache: the T new
        positions are appended to the cache and self_mask is [B,1,T,Tcap]."""

        def self_fn(h):
            if self.uses_ssru:
                c0 = cache.ssru_state() if cache is not None else None
                out, cs = self.ssru(h, c0)
                if cache is not None:
                    cache.write_ssru(cs)
                return out
            if cache is None:
                return self.self_attn(h, h, self_mask)
            k, v = self.self_attn.project_kv(h)
            ks, vs = cache.write_kv(k, v)
            return self.self_attn.attend(h, ks, vs, self_mask)

        x = Sublayer.run(x, self.ln_self, self_fn, self.pre, self.dropout, self.training)
        x = Sublayer.run(x, self.ln_cross, lambda h: self.cross_attn.attend(h, *cross_kv, cross_mask),
                         self.pre, self.dropout, self.training)
        return Sublayer.run(x, self.ln_ffn, self.ffn, self.pre, self.dropout, self.training)


# ----------------------------------------------------------------------------- model
class Encoder(nn.Module):
    def __init__(self, cfg, dropout, attn_dropout, act_dropout):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(cfg, s, dropout, attn_dropout, act_dropout) for s in cfg.encoder_layers)
        if cfg.norm == "pre":
            self.final_ln = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)

    def forward(self, x, mask):
        for layer in self.layers:
            x = layer(x, mask)
        return self.final_ln(x) if hasattr(self, "final_ln") else x


class Decoder(nn.Module):
    def __init__(self, cfg, dropout, attn_dropout, act_dropout):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(cfg, s, dropout, attn_dropout, act_dropout) for s in cfg.decoder_layers)
        if cfg.norm == "pre":
            self.final_ln = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)

    def forward(self, x, self_mask, memory_or_cross, cross_mask, cache: DecoderCache | None = None):
        for i, layer in enumerate(self.layers):
            cross_kv = cache.cross[i] if cache is not None else layer.cross_attn.project_kv(memory_or_cross)
            x = layer(x, self_mask, cross_kv, cross_mask, cache.layers[i] if cache is not None else None)
        return self.final_ln(x) if hasattr(self, "final_ln") else x


class ProposalHead(nn.Module):
    """One blockwise proposal head (Stern et al. 2018): h = s + fc2(relu(fc1(s))) on the
    decoder's final state s; the model's own output layer reads h."""

    def __init__(self, d_model: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(d_model, hidden)
        self.fc2 = nn.Linear(hidden, d_model)

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        return s + self.fc2(torch.relu(self.fc1(s)))


class ProposalHeads(nn.ModuleList):
    """K heads; head i proposes the token i+1 places after the verifier's own next token
    (export/FORMAT.md, *Proposal heads*). forward: s [..., d] -> h [..., K, d]."""

    def __init__(self, d_model: int, count: int, hidden: int):
        super().__init__(ProposalHead(d_model, hidden) for _ in range(count))

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        return torch.stack([head(s) for head in self], dim=-2)


class Output(nn.Module):
    """The output bias; the output weight is the tied embedding matrix."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(vocab_size))


class Seq2Seq(nn.Module):
    """Encoder-decoder with one embedding matrix tied across source, target and output."""

    def __init__(self, cfg: ModelConfig, dropout: float = 0.0, attn_dropout: float = 0.0, act_dropout: float = 0.0):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        nn.init.normal_(self.embed.weight, std=cfg.d_model ** -0.5)
        self.output = Output(cfg.vocab_size)
        # A shared-encoder model reads its host's encoder output (attach_host); its own
        # embedding only embeds target tokens and forms the output layer.
        self.encoder = None if cfg.encoder_shared else Encoder(cfg, dropout, attn_dropout, act_dropout)
        self.host: "Seq2Seq | None" = None
        self.decoder = Decoder(cfg, dropout, attn_dropout, act_dropout)
        self.dropout = dropout
        for name, p in self.named_parameters():
            if p.dim() == 2 and not name.startswith("embed"):
                nn.init.xavier_uniform_(p)
        if cfg.heads is not None:
            # Made last, so the rest draws the same initial weights as without heads.
            self.heads = ProposalHeads(cfg.d_model, *cfg.heads)
            for p in self.heads.parameters():
                if p.dim() == 2:
                    nn.init.xavier_uniform_(p)
        self.pad, self.bos, self.eos = cfg.tokens["pad"], cfg.tokens["bos"], cfg.tokens["eos"]
        self.mask_id = cfg.tokens.get("mask")  # a "transformer" may have none
        if cfg.suppress:  # tokens never generated: -inf logits (the stored bias stays finite)
            suppress = torch.zeros(cfg.vocab_size)
            suppress[cfg.suppress] = NEG_INF
            self.register_buffer("suppress_bias", suppress, persistent=False)

    # -- embeddings and output
    def embed_tokens(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) * math.sqrt(self.cfg.d_model) + sinusoidal_positions(positions, self.cfg.d_model,
                                                                                 self.cfg.positions)
        return fast_dropout(x, self.dropout, self.training)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        bias = self.output.bias
        if self.cfg.suppress:
            bias = bias + self.suppress_bias
        return F.linear(h, self.embed.weight, bias)

    def add_heads(self, count: int, hidden: int) -> "Seq2Seq":
        """Gives this model K = count fresh (xavier-initialised) proposal heads of `hidden`
        units, replacing any it had; the rest of the model is untouched. Returns self."""
        self.cfg.heads = (count, hidden)
        self.cfg.__post_init__()  # validates the pair (and refuses a drafter)
        self.heads = ProposalHeads(self.cfg.d_model, count, hidden)
        for p in self.heads.parameters():
            if p.dim() == 2:
                nn.init.xavier_uniform_(p)
        return self

    def proposal_logits(self, s: torch.Tensor) -> torch.Tensor:
        """Final decoder states s [..., d] -> the heads' logits [..., K, V] (tied output layer)."""
        if not hasattr(self, "heads"):
            raise ValueError("proposal_logits: this model has no proposal heads (config heads = None)")
        return self.logits(self.heads(s))

    def attach_host(self, host: "Seq2Seq") -> "Seq2Seq":
        """Makes `encode` run host's encoder (frozen, in eval mode: this model trains only
        its decoder over it). host is not a submodule: its weights are not this model's
        parameters and are not saved with it. Returns self."""
        if self.encoder is not None:
            raise ValueError("attach_host: this model has its own encoder (config encoder.shared is absent)")
        if host.cfg.d_model != self.cfg.d_model or host.cfg.vocab_size != self.cfg.vocab_size:
            raise ValueError(f"attach_host: host d_model/vocab_size {host.cfg.d_model}/{host.cfg.vocab_size} differ "
                             f"from this model's {self.cfg.d_model}/{self.cfg.vocab_size}")
        for p in host.parameters():
            p.requires_grad_(False)
        object.__setattr__(self, "host", host.eval())
        return self

    # -- encoder
    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src [B,S] (pad-padded) -> (memory [B,S,d], src_keep [B,S] bool)."""
        if self.encoder is None:
            if self.host is None:
                raise ValueError("encode: this model shares another model's encoder; attach_host(host) first")
            with torch.no_grad():
                return self.host.encode(src)
        keep = src != self.pad
        pos = torch.arange(src.shape[1], device=src.device).expand_as(src)
        memory = self.encoder(self.embed_tokens(src, pos), keep[:, None, None, :])
        return memory, keep

    # -- full-sequence decoder (training, reference)
    def decode_full(self, tgt_in: torch.Tensor, memory, src_keep, self_mask: torch.Tensor | None = None):
        """tgt_in [B,T] starting with BOS -> hidden [B,T,d]. Causal unless self_mask is given."""
        t = tgt_in.shape[1]
        if self_mask is None:
            self_mask = torch.ones(t, t, dtype=torch.bool, device=tgt_in.device).tril()[None, None]
        pos = torch.arange(t, device=tgt_in.device).expand_as(tgt_in)
        return self.decoder(self.embed_tokens(tgt_in, pos), self_mask, memory, src_keep[:, None, None, :])

    def forward(self, src, tgt_in, self_mask=None):
        memory, keep = self.encode(src)
        return self.logits(self.decode_full(tgt_in, memory, keep, self_mask))

    # -- incremental decoder (reference decoding and the torch backend)
    def start_cache(self, memory, src_keep) -> DecoderCache:
        return DecoderCache(self, memory, src_keep)

    def decode_step(self, tokens: torch.Tensor, cache: DecoderCache) -> torch.Tensor:
        """Append tokens [B,n] to every row (row b at its own offset) -> hidden [B,n,d]."""
        if self.cfg.arch != "transformer":
            raise ValueError("decode_step is for autoregressive models; a drafter uses draft_block")
        n = tokens.shape[1]
        cache.reserve(n)
        _, pos = cache.write_index(n)
        x = self.embed_tokens(tokens, pos)
        h = self.decoder(x, cache.self_mask(n), None, cache.src_keep[:, None, None, :], cache)
        cache.lengths = cache.lengths + n
        return h

    # -- drafter
    @staticmethod
    def block_mask(prefix_lens: torch.Tensor, k: int, length: int) -> torch.Tensor:
        """[B,1,L,L] for inputs laid out as BOS, prefix (m_b tokens), k masks, padding.

        Prefix positions (incl. BOS) attend causally among themselves, so an engine can
        cache them; the k mask positions attend to the whole prefix and all k masks;
        padding positions only see BOS (keeps softmax finite, their output is unused).
        """
        i = torch.arange(length, device=prefix_lens.device).view(1, -1, 1)
        j = torch.arange(length, device=prefix_lens.device).view(1, 1, -1)
        p = (prefix_lens + 1).view(-1, 1, 1)  # BOS + prefix
        causal_prefix = (i < p) & (j <= i)
        block = (i >= p) & (i < p + k) & (j < p + k)
        pad = (i >= p + k) & (j == 0)
        return (causal_prefix | block | pad).unsqueeze(1)

    @staticmethod
    def block_inputs(prefixes: list[list[int]], k: int, bos: int, mask_id: int, pad: int):
        """Pad-right batch of BOS + prefix + k masks; returns (ids [B,L], prefix_lens [B])."""
        lens = torch.tensor([len(p) for p in prefixes], dtype=torch.long)
        length = int(lens.max()) + 1 + k if len(prefixes) else 1 + k
        ids = torch.full((len(prefixes), length), pad, dtype=torch.long)
        for b, p in enumerate(prefixes):
            ids[b, : 1 + len(p) + k] = torch.tensor([bos] + list(p) + [mask_id] * k)
        return ids, lens

    def draft_logits(self, memory, src_keep, prefixes: list[list[int]], k: int | None = None) -> torch.Tensor:
        """Logits [B,k,V] of the k mask positions, i.e. the next k target tokens."""
        k = k or self.cfg.block_size
        ids, lens = self.block_inputs(prefixes, k, self.bos, self.mask_id, self.pad)
        h = self.decode_full(ids, memory, src_keep, self.block_mask(lens, k, ids.shape[1]))
        idx = (lens + 1).unsqueeze(1) + torch.arange(k)
        h = h[torch.arange(h.shape[0]).unsqueeze(1), idx]
        return self.logits(h)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
