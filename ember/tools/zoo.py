"""The benchmark zoo: models (and memory-bound kernels) that `ember bench` runs.

Every model is built from code and a config with random weights; nothing is
ever downloaded.  Five sources, each used only when its package imports:

- ``builtin``      needs only torch: ``mlp``, ``transformer_block``,
                   ``small_resnet``, ``small_vit`` (defined here), so the
                   harness runs on any machine;
- ``ember.tools.vision`` needs only torch: ``resnet50_ours``, ``densenet121_ours``,
                   ``mobilenet_v2_ours``, ``vit_b_16_ours``, ember's own
                   definitions (ember/tools/vision.py) of the torchvision
                   architectures, for machines without torchvision (PyPI has
                   no CPU build of it);
- ``torchvision``  ``torchvision.models.X(weights=None)``;
- ``timm``         ``timm.create_model(name, pretrained=False)``; any timm model
                   can also be named as ``timm:NAME``;
- ``transformers`` Hugging Face models built from their Config objects, sized
                   as the real checkpoints (``--small`` shrinks them for CPUs).

Each entry knows how to build the model, make example inputs for a batch size
(plus a training target), and compute a training loss from the output.
Dropout is switched off everywhere (p = 0) so that eager and compiled
training steps are comparable: compilers use their own random streams.

Groups: ``builtin``, ``vision`` (torchvision + timm + ember.tools.vision), ``nlp``
(transformers), ``all``; and two sweeps, kept out of ``all``: ``sweep-timm``
(63 timm architectures by family, built as ``timm:NAME``) and ``sweep-hf``
(40 Hugging Face architectures: encoders, decoders, encoder-decoders, vision
and speech), for broad comparisons of the backends (`SWEEPS`).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import vision

GROUPS = ("builtin", "vision", "nlp", "all", "sweep-timm", "sweep-hf")

# The sweeps: (model, family).  timm models are named as timm:NAME and need
# nothing but timm to list; every one takes 224 x 224 images.  The families
# are those whose kernels differ: plain convolutions; depthwise convolutions
# with squeeze-and-excitation gates; ConvNeXt's 7x7 depthwise + LayerNorm;
# attention over patches (ViT); shifted windows (rolls, window partitions);
# MaxViT/CoAtNet's block and grid partitions; token-mixing MLPs; pooling as
# the token mixer; and hybrids of convolutions and attention.
SWEEP_TIMM: Tuple[Tuple[str, str], ...] = tuple(
    (n, fam) for fam, names in (
        ("cnn", ("resnet18", "resnet50", "resnext50_32x4d", "wide_resnet50_2", "regnetx_016",
                 "regnety_016", "regnety_032", "densenet121", "dla34", "res2net50_26w_4s",
                 "seresnext26d_32x4d", "cspdarknet53", "repvgg_a2", "vgg16", "inception_v3",
                 "nf_resnet50", "dm_nfnet_f0", "hrnet_w18_small")),
        ("depthwise-se", ("efficientnet_b0", "efficientnetv2_rw_s", "mobilenetv3_large_100",
                          "mobilenetv2_100", "ghostnet_100", "mnasnet_100", "rexnet_100",
                          "lcnet_100", "mixnet_s", "mobilenetv4_conv_small", "regnetz_b16")),
        ("convnext", ("convnext_tiny", "convnextv2_tiny", "inception_next_tiny", "edgenext_small")),
        ("vit", ("vit_small_patch16_224", "vit_base_patch16_224", "deit_small_patch16_224",
                 "beit_base_patch16_224", "cait_xxs24_224", "eva02_tiny_patch14_224",
                 "xcit_tiny_12_p16_224", "pit_s_224", "levit_128")),
        ("swin", ("swin_tiny_patch4_window7_224", "swinv2_cr_tiny_ns_224", "davit_tiny",
                  "hiera_tiny_224")),
        ("maxvit", ("maxvit_tiny_tf_224", "coatnet_0_rw_224", "coatnet_nano_rw_224")),
        ("mlp-mixer", ("mixer_b16_224", "resmlp_12_224", "gmlp_s16_224")),
        ("poolformer", ("poolformer_s12", "poolformerv2_s12")),
        ("hybrid", ("mobilevit_s", "efficientformer_l1", "fastvit_t8", "tiny_vit_5m_224",
                    "efficientvit_b0", "focalnet_tiny_srf", "twins_svt_small", "volo_d1_224",
                    "tnt_s_patch16_224")))
    for n in names)

# Hugging Face architectures of the sweep (zoo names, see _HF): encoders,
# decoders, encoder-decoders, vision and speech models.
SWEEP_HF: Tuple[Tuple[str, str], ...] = (
    ("bert-base", "encoder"), ("distilbert", "encoder"), ("roberta", "encoder"),
    ("albert", "encoder"), ("electra", "encoder"), ("deberta-v2", "encoder"),
    ("gpt2", "decoder"), ("llama", "decoder"), ("opt", "decoder"), ("gpt-neo", "decoder"),
    ("t5-small", "encoder-decoder"), ("bart", "encoder-decoder"),
    ("hf-vit", "vision"), ("whisper", "speech"), ("wav2vec2", "speech"),
    ("mobilebert", "encoder"), ("mpnet", "encoder"), ("funnel", "encoder"),
    ("convbert", "encoder"), ("squeezebert", "encoder"),
    ("qwen2", "decoder"), ("phi", "decoder"), ("gemma", "decoder"), ("falcon", "decoder"),
    ("bloom", "decoder"), ("gpt-neox", "decoder"), ("codegen", "decoder"),
    ("marian", "encoder-decoder"), ("pegasus", "encoder-decoder"), ("mbart", "encoder-decoder"),
    ("flan-t5", "encoder-decoder"),
    ("hf-swin", "vision"), ("hf-convnext", "vision"), ("deit", "vision"), ("beit", "vision"),
    ("segformer", "vision"), ("dinov2", "vision"),
    ("hubert", "speech"), ("wavlm", "speech"), ("speech2text", "speech"))

SWEEPS: Dict[str, Tuple[Tuple[str, str], ...]] = {"sweep-timm": SWEEP_TIMM, "sweep-hf": SWEEP_HF}


def family(name: str) -> Optional[str]:
    """The sweep family of a model name (timm:NAME or a zoo name), if any."""
    for members in SWEEPS.values():
        for n, fam in members:
            if name in (n, "timm:" + n):
                return fam
    return None


# --------------------------------------------------------------------------
# the context a zoo entry is built in
# --------------------------------------------------------------------------
@dataclasses.dataclass
class Ctx:
    """What a zoo entry needs to size itself."""
    device: str = "cpu"
    small: bool = False          # the --small variants (tiny configs, small images)
    seq_len: Optional[int] = None  # NLP sequence length; default 512 on GPU, 128 on CPU
    image_size: Optional[int] = None  # vision models' image side; default 224 (64 small)

    @property
    def cuda(self) -> bool:
        return str(self.device).startswith("cuda")

    def seq(self) -> int:
        if self.seq_len:
            return int(self.seq_len)
        s = 512 if self.cuda else 128
        return min(s, 128) if self.small else s

    def image(self) -> int:
        if self.image_size:
            return int(self.image_size)
        return 64 if self.small else 224


@dataclasses.dataclass
class Example:
    """Example inputs for one step: model(*args, **kwargs); loss(out, target)."""
    args: Tuple[Any, ...]
    kwargs: Dict[str, Any]
    target: Any


@dataclasses.dataclass
class ZooEntry:
    name: str
    group: str                    # builtin / vision / nlp
    source: str                   # builtin / ember.tools.vision / torchvision / timm / transformers
    build: Callable[[Ctx], nn.Module]
    inputs: Callable[[Ctx, int, torch.Generator], Example]   # CPU tensors
    loss: Callable[[Any, Any], torch.Tensor]
    batch_gpu: int
    batch_cpu: int
    description: str = ""

    def available(self) -> bool:
        return _have(_REQUIRES[self.source])

    def default_batch(self, ctx: Ctx) -> int:
        return self.batch_gpu if ctx.cuda else self.batch_cpu

    def make_model(self, ctx: Ctx) -> nn.Module:
        model = self.build(ctx)
        disable_dropout(model)
        return model


_REQUIRES = {"builtin": None, "ember.tools.vision": None, "torchvision": "torchvision",
             "timm": "timm", "transformers": "transformers"}


def _have(mod: Optional[str]) -> bool:
    if mod is None:
        return True
    try:
        return importlib.util.find_spec(mod) is not None
    except (ImportError, ValueError):
        return False


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------
def disable_dropout(model: nn.Module) -> nn.Module:
    """Set every dropout-like probability to 0 (nn.Dropout*, torchvision's
    StochasticDepth, timm's DropPath, attention-dropout floats)."""
    for m in model.modules():
        cls = type(m).__name__
        if isinstance(m, nn.modules.dropout._DropoutNd) or "Dropout" in cls or \
                "StochasticDepth" in cls or "DropPath" in cls:
            for attr in ("p", "drop_prob"):
                if isinstance(getattr(m, attr, None), float):
                    setattr(m, attr, 0.0)
        # float dropout probabilities used in F.scaled_dot_product_attention calls
        for attr in ("dropout", "attention_dropout", "attn_dropout_p", "dropout_p"):
            v = getattr(m, attr, None)
            if isinstance(v, float) and not isinstance(v, bool):
                setattr(m, attr, 0.0)
    return model


def output_tensors(out: Any) -> List[Tuple[str, torch.Tensor]]:
    """Flatten a model output (tensor, tuple, dict, HF ModelOutput) into
    named tensors, in a stable order; non-tensor leaves are dropped."""
    res: List[Tuple[str, torch.Tensor]] = []

    def walk(x: Any, path: str) -> None:
        if isinstance(x, torch.Tensor):
            res.append((path or "out", x))
        elif isinstance(x, dict) or (hasattr(x, "keys") and hasattr(x, "__getitem__")
                                     and not isinstance(x, (str, bytes))):
            try:
                keys = list(x.keys())
            except Exception:
                return
            for k in keys:
                walk(x[k], f"{path}.{k}" if path else str(k))
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(v, f"{path}[{i}]" if path else f"out[{i}]")

    walk(out, "")
    return res


def _first_tensor(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    logits = getattr(out, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    ts = output_tensors(out)
    if not ts:
        raise TypeError(f"model output {type(out).__name__} holds no tensor")
    return ts[0][1]


def classification_loss(out: Any, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(_first_tensor(out).float(), target)


def token_loss(out: Any, target: torch.Tensor) -> torch.Tensor:
    logits = _first_tensor(out)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), target.reshape(-1))


def regression_loss(out: Any, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(_first_tensor(out).float(), target)


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


def _randint(g: torch.Generator, low: int, high: int, *shape: int) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=g)


def _image_inputs(num_classes: int = 1000):
    def make(ctx: Ctx, bs: int, g: torch.Generator) -> Example:
        s = ctx.image()
        return Example((_randn(g, bs, 3, s, s),), {}, _randint(g, 0, num_classes, bs))
    return make


# --------------------------------------------------------------------------
# the built-in models (torch only)
# --------------------------------------------------------------------------
class MLP(nn.Module):
    """Linear -> LayerNorm -> GELU blocks, then a classifier."""

    def __init__(self, d_in: int = 1024, hidden: int = 2048, depth: int = 3,
                 n_classes: int = 1000):
        super().__init__()
        layers: List[nn.Module] = []
        d = d_in
        for _ in range(depth):
            layers += [nn.Linear(d, hidden), nn.LayerNorm(hidden), nn.GELU()]
            d = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(d, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class TransformerBlock(nn.Module):
    """A pre-LayerNorm transformer encoder block (SDPA attention, GELU MLP)."""

    def __init__(self, d: int = 768, heads: int = 12, ff: int = 3072):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, ff)
        self.fc2 = nn.Linear(ff, d)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v)
        return self.proj(o.transpose(1, 2).reshape(b, s, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                       nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.short is None else self.short(x)))


class SmallResNet(nn.Module):
    """A CIFAR-style ResNet: three stages of basic blocks on 32x32 images."""

    def __init__(self, widths: Sequence[int] = (32, 64, 128), blocks: int = 2,
                 n_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU())
        layers: List[nn.Module] = []
        cin = widths[0]
        for i, w in enumerate(widths):
            for j in range(blocks):
                layers.append(_BasicBlock(cin, w, 2 if (i > 0 and j == 0) else 1))
                cin = w
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class SmallViT(nn.Module):
    """A ViT on 32x32 images, 4x4 patches, class token, pre-LN blocks."""

    def __init__(self, d: int = 192, depth: int = 6, heads: int = 3, image: int = 32,
                 patch: int = 4, n_classes: int = 10):
        super().__init__()
        n = (image // patch) ** 2
        self.patch = nn.Conv2d(3, d, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        self.blocks = nn.Sequential(*[TransformerBlock(d, heads, 4 * d) for _ in range(depth)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.ln(self.blocks(x))
        return self.head(x[:, 0])


def _mlp_dims(ctx: Ctx) -> Tuple[int, int]:
    return (256, 512) if ctx.small else (1024, 2048)


def _tb_dims(ctx: Ctx) -> Tuple[int, int, int]:
    """(d, heads, seq) of the transformer block."""
    if ctx.small:
        return 256, 4, 128
    return 768, 12, (512 if ctx.cuda else 256)


def _build_mlp(ctx: Ctx) -> nn.Module:
    d_in, hidden = _mlp_dims(ctx)
    return MLP(d_in, hidden, 3, 1000)


def _inputs_mlp(ctx: Ctx, bs: int, g: torch.Generator) -> Example:
    d_in, _ = _mlp_dims(ctx)
    return Example((_randn(g, bs, d_in),), {}, _randint(g, 0, 1000, bs))


def _build_tb(ctx: Ctx) -> nn.Module:
    d, h, _ = _tb_dims(ctx)
    return TransformerBlock(d, h, 4 * d)


def _inputs_tb(ctx: Ctx, bs: int, g: torch.Generator) -> Example:
    d, _, s = _tb_dims(ctx)
    return Example((_randn(g, bs, s, d),), {}, _randn(g, bs, s, d))


def _build_small_resnet(ctx: Ctx) -> nn.Module:
    return SmallResNet((16, 32, 64) if ctx.small else (32, 64, 128), 2, 10)


def _build_small_vit(ctx: Ctx) -> nn.Module:
    return SmallViT(96, 2, 3) if ctx.small else SmallViT(192, 6, 3)


def _inputs_cifar(ctx: Ctx, bs: int, g: torch.Generator) -> Example:
    return Example((_randn(g, bs, 3, 32, 32),), {}, _randint(g, 0, 10, bs))


# --------------------------------------------------------------------------
# ember's own definitions of torchvision architectures (torch only)
# --------------------------------------------------------------------------
def _ours(name: str) -> Callable[[Ctx], nn.Module]:
    """torchvision's architecture ``name`` as defined in ember/tools/vision.py, with
    torchvision's initialisation; a ViT is sized for the context's images."""
    def build(ctx: Ctx) -> nn.Module:
        if name == "vit_b_16":
            return vision.ViT(image=ctx.image())
        model = {"resnet50": vision.ResNet, "densenet121": vision.DenseNet,
                 "mobilenet_v2": vision.MobileNetV2}[name]()
        return vision.init_like_torchvision(model)
    return build


# --------------------------------------------------------------------------
# torchvision and timm
# --------------------------------------------------------------------------
def _tv(name: str) -> Callable[[Ctx], nn.Module]:
    def build(ctx: Ctx) -> nn.Module:
        import torchvision.models as tvm
        kw: Dict[str, Any] = {"weights": None}
        if name.startswith("vit_"):
            kw["image_size"] = ctx.image()
        return getattr(tvm, name)(**kw)
    return build


def _timm(name: str) -> Callable[[Ctx], nn.Module]:
    def build(ctx: Ctx) -> nn.Module:
        import timm
        kw: Dict[str, Any] = {"pretrained": False, "drop_rate": 0.0}
        try:
            return timm.create_model(name, drop_path_rate=0.0,
                                     **({"img_size": ctx.image()} if _timm_takes_img_size(name) else {}),
                                     **kw)
        except TypeError:
            return timm.create_model(name, **kw)
    return build


def _timm_takes_img_size(name: str) -> bool:
    return any(name.startswith(p) for p in ("vit_", "deit", "swin", "beit", "eva", "cait"))


# --------------------------------------------------------------------------
# Hugging Face transformers, from configs
# --------------------------------------------------------------------------
_NO_DROPOUT = ("hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop",
               "embd_pdrop", "attn_pdrop", "summary_first_dropout", "dropout_rate",
               "dropout", "attention_dropout", "seq_classif_dropout", "qa_dropout",
               "classifier_dropout", "classifier_dropout_prob", "hidden_dropout",
               "activation_dropout", "feat_proj_dropout", "final_dropout", "embed_dropout",
               "layerdrop", "encoder_layerdrop", "decoder_layerdrop", "mask_time_prob",
               "mask_feature_prob")


def _hf_config(cls_name: str, full: Dict[str, Any], small: Dict[str, Any], ctx: Ctx):
    import transformers
    kw = dict(full)
    if ctx.small:
        kw.update(small)
    cfg = getattr(transformers, cls_name)(**kw)
    for k in _NO_DROPOUT:
        if hasattr(cfg, k) and isinstance(getattr(cfg, k), float):
            setattr(cfg, k, 0.0)
    cfg.use_cache = False
    return cfg


_HF_SMALL = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=512, vocab_size=1024)
_ED_SMALL = dict(d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                 decoder_attention_heads=2, encoder_ffn_dim=512, decoder_ffn_dim=512,
                 vocab_size=1024)
_VIT_SMALL = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=512)
_WAVE_SMALL = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=512, conv_dim=(64,) * 7, num_conv_pos_embeddings=16,
                   num_conv_pos_embedding_groups=4)

_HF = {
    # name: (model class, config class, real config (the checkpoint's), small override, vocab)
    "bert-base": ("BertForMaskedLM", "BertConfig", {}, dict(_HF_SMALL)),
    "distilbert": ("DistilBertForMaskedLM", "DistilBertConfig", {},
                   dict(dim=128, n_layers=2, n_heads=2, hidden_dim=512, vocab_size=1024)),
    "roberta": ("RobertaForMaskedLM", "RobertaConfig",
                dict(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
                     pad_token_id=1, bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5),
                dict(_HF_SMALL)),
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", {},
             dict(n_embd=128, n_layer=2, n_head=2, vocab_size=1024)),
    "t5-small": ("T5ForConditionalGeneration", "T5Config",
                 dict(d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                      vocab_size=32128, decoder_start_token_id=0, pad_token_id=0),
                 dict(d_model=128, d_kv=32, d_ff=512, num_layers=2, num_heads=4,
                      vocab_size=1024)),
    # the sweep's other architectures (group sweep-hf), sized as the named checkpoints
    "albert": ("AlbertForMaskedLM", "AlbertConfig",          # albert-base-v2
               dict(embedding_size=128, hidden_size=768, num_hidden_layers=12,
                    num_attention_heads=12, intermediate_size=3072, vocab_size=30000),
               dict(_HF_SMALL, embedding_size=64)),
    "electra": ("ElectraForMaskedLM", "ElectraConfig",       # electra-base
                dict(embedding_size=768, hidden_size=768, num_hidden_layers=12,
                     num_attention_heads=12, intermediate_size=3072, vocab_size=30522),
                dict(_HF_SMALL, embedding_size=128)),
    "deberta-v2": ("DebertaV2ForMaskedLM", "DebertaV2Config",  # deberta-v3-base
                   dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072, vocab_size=128100, relative_attention=True,
                        position_buckets=256, pos_att_type=["p2c", "c2p"],
                        max_relative_positions=-1, norm_rel_ebd="layer_norm",
                        share_att_key=True, position_biased_input=False, type_vocab_size=0),
                   dict(_HF_SMALL, position_buckets=32)),
    "llama": ("LlamaForCausalLM", "LlamaConfig",             # TinyLlama-1.1B
              dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                   num_attention_heads=32, num_key_value_heads=4, vocab_size=32000,
                   max_position_embeddings=2048),
              dict(_HF_SMALL, num_key_value_heads=1)),
    "opt": ("OPTForCausalLM", "OPTConfig",                   # opt-125m
            dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, ffn_dim=3072,
                 vocab_size=50272, word_embed_proj_dim=768),
            dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, ffn_dim=512,
                 vocab_size=1024, word_embed_proj_dim=128)),
    "gpt-neo": ("GPTNeoForCausalLM", "GPTNeoConfig",         # gpt-neo-125M
                dict(hidden_size=768, num_layers=12, num_heads=12, vocab_size=50257,
                     attention_types=[[["global", "local"], 6]], window_size=256),
                dict(hidden_size=128, num_layers=2, num_heads=2, vocab_size=1024,
                     attention_types=[[["global", "local"], 1]], window_size=32)),
    "bart": ("BartForConditionalGeneration", "BartConfig",   # bart-base
             dict(d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
                  decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072,
                  vocab_size=50265),
             dict(d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                  decoder_attention_heads=2, encoder_ffn_dim=512, decoder_ffn_dim=512,
                  vocab_size=1024)),
    "hf-vit": ("ViTForImageClassification", "ViTConfig",     # vit-base-patch16-224
               dict(num_labels=1000),
               dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=512)),
    "whisper": ("WhisperForConditionalGeneration", "WhisperConfig",   # whisper-tiny
                dict(d_model=384, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
                     decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536,
                     vocab_size=51865, num_mel_bins=80, max_source_positions=1500,
                     max_target_positions=448),
                dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=256, decoder_ffn_dim=256,
                     vocab_size=1024, max_source_positions=64, max_target_positions=64,
                     pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)),
    "wav2vec2": ("Wav2Vec2ForCTC", "Wav2Vec2Config",         # wav2vec2-base, a CTC head
                 dict(vocab_size=32),
                 dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=512, conv_dim=(64,) * 7, num_conv_pos_embeddings=16,
                      num_conv_pos_embedding_groups=4)),
    # decoders: grouped-query attention with q/k/v biases; partial rotary
    # embeddings; multi-query attention with 256-wide heads; ALiBi (twice: Falcon's
    # and BLOOM's own code); GPT-NeoX's parallel residual; GPT-J-style rotary of
    # interleaved pairs and a parallel block (CodeGen is GPT-J's code path; it
    # splits q, k, v over 4 groups, so its small variant has 4 heads)
    "qwen2": ("Qwen2ForCausalLM", "Qwen2Config",             # Qwen2-0.5B
              dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                   num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                   max_position_embeddings=32768, rope_theta=1000000.0, tie_word_embeddings=True),
              dict(_HF_SMALL, num_key_value_heads=1)),
    "phi": ("PhiForCausalLM", "PhiConfig",                   # phi-1_5
            dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=24,
                 num_attention_heads=32, vocab_size=51200, partial_rotary_factor=0.5,
                 max_position_embeddings=2048, hidden_act="gelu_new"),
            dict(_HF_SMALL)),
    "gemma": ("GemmaForCausalLM", "GemmaConfig",             # gemma-2b
              dict(hidden_size=2048, intermediate_size=16384, num_hidden_layers=18,
                   num_attention_heads=8, num_key_value_heads=1, head_dim=256, vocab_size=256000),
              dict(_HF_SMALL, num_key_value_heads=1, head_dim=64)),
    "falcon": ("FalconForCausalLM", "FalconConfig",          # falcon-rw-1b
               dict(hidden_size=2048, num_hidden_layers=24, num_attention_heads=32,
                    vocab_size=50304, alibi=True, bias=True, multi_query=False,
                    new_decoder_architecture=False, parallel_attn=False),
               dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, vocab_size=1024)),
    "bloom": ("BloomForCausalLM", "BloomConfig",             # bloom-560m
              dict(hidden_size=1024, n_layer=24, n_head=16, vocab_size=250880),
              dict(hidden_size=128, n_layer=2, n_head=2, vocab_size=1024)),
    "gpt-neox": ("GPTNeoXForCausalLM", "GPTNeoXConfig",      # pythia-160m
                 dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072, vocab_size=50304, rotary_pct=0.25,
                      use_parallel_residual=True, max_position_embeddings=2048),
                 dict(_HF_SMALL)),
    "codegen": ("CodeGenForCausalLM", "CodeGenConfig",       # codegen-350M-mono
                dict(n_embd=1024, n_layer=20, n_head=16, rotary_dim=32, vocab_size=51200,
                     n_positions=2048, n_ctx=2048),
                dict(n_embd=128, n_layer=2, n_head=4, rotary_dim=16, vocab_size=1024,
                     bos_token_id=1, eos_token_id=2)),
    # encoders: bottlenecks and NoNorm; relative position buckets; pooling of the
    # sequence and upsampling back; span-based dynamic convolutions; grouped
    # 1x1 convolutions in place of the linear layers
    "mobilebert": ("MobileBertForMaskedLM", "MobileBertConfig",   # mobilebert-uncased
                   {}, dict(num_hidden_layers=2, vocab_size=1024)),
    "mpnet": ("MPNetForMaskedLM", "MPNetConfig",             # mpnet-base
              dict(vocab_size=30527), dict(_HF_SMALL)),
    "funnel": ("FunnelForMaskedLM", "FunnelConfig",          # funnel-transformer/small
               {}, dict(block_sizes=[1, 1], num_decoder_layers=1, d_model=128, n_head=2,
                        d_head=64, d_inner=512, vocab_size=1024)),
    "convbert": ("ConvBertForMaskedLM", "ConvBertConfig",    # conv-bert-base
                 dict(embedding_size=768, head_ratio=2, conv_kernel_size=9),
                 dict(_HF_SMALL, embedding_size=128)),
    "squeezebert": ("SqueezeBertForMaskedLM", "SqueezeBertConfig",   # squeezebert-uncased
                    dict(vocab_size=30528),
                    dict(_HF_SMALL, embedding_size=128)),
    # encoder-decoders: sinusoidal positions (Marian post-norm, Pegasus pre-norm);
    # pre-norm with learned positions and a 250k vocabulary; T5 with gated GELU
    "marian": ("MarianMTModel", "MarianConfig",              # opus-mt-en-de
               dict(vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6,
                    encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
                    decoder_ffn_dim=2048, max_position_embeddings=512, activation_function="swish",
                    scale_embedding=True, pad_token_id=58100, decoder_start_token_id=58100,
                    eos_token_id=0),
               dict(_ED_SMALL, pad_token_id=1023, decoder_start_token_id=1023)),
    "pegasus": ("PegasusForConditionalGeneration", "PegasusConfig",   # pegasus-xsum
                dict(vocab_size=96103, d_model=1024, encoder_layers=16, decoder_layers=16,
                     encoder_attention_heads=16, decoder_attention_heads=16, encoder_ffn_dim=4096,
                     decoder_ffn_dim=4096, max_position_embeddings=512, scale_embedding=True,
                     activation_function="relu", pad_token_id=0, eos_token_id=1,
                     decoder_start_token_id=0),
                dict(_ED_SMALL)),
    "mbart": ("MBartForConditionalGeneration", "MBartConfig",   # mbart-large-cc25
              dict(vocab_size=250027, d_model=1024, encoder_layers=12, decoder_layers=12,
                   encoder_attention_heads=16, decoder_attention_heads=16, encoder_ffn_dim=4096,
                   decoder_ffn_dim=4096, max_position_embeddings=1024, scale_embedding=True,
                   pad_token_id=1, bos_token_id=0, eos_token_id=2),
              dict(_ED_SMALL)),
    "flan-t5": ("T5ForConditionalGeneration", "T5Config",    # flan-t5-small
                dict(d_model=512, d_kv=64, d_ff=1024, num_layers=8, num_decoder_layers=8,
                     num_heads=6, vocab_size=32128, feed_forward_proj="gated-gelu",
                     tie_word_embeddings=False, decoder_start_token_id=0, pad_token_id=0),
                dict(d_model=128, d_kv=32, d_ff=256, num_layers=2, num_decoder_layers=2,
                     num_heads=4, vocab_size=1024)),
    # vision: shifted windows; ConvNeXt's 7x7 depthwise blocks; DeiT; BEiT's
    # relative position bias and layer scale; SegFormer's reduced-key attention
    # and Mix-FFN; DINOv2 (patch 14, layer scale)
    "hf-swin": ("SwinForImageClassification", "SwinConfig",  # swin-tiny-patch4-window7-224
                dict(num_labels=1000),
                dict(embed_dim=32, depths=[1, 1], num_heads=[1, 2], window_size=4)),
    "hf-convnext": ("ConvNextForImageClassification", "ConvNextConfig",  # convnext-tiny-224
                    dict(num_labels=1000),
                    dict(num_stages=2, hidden_sizes=[32, 64], depths=[1, 1])),
    "deit": ("DeiTForImageClassification", "DeiTConfig",     # deit-small-patch16-224
             dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
                  intermediate_size=1536, num_labels=1000),
             dict(_VIT_SMALL)),
    "beit": ("BeitForImageClassification", "BeitConfig",     # beit-base-patch16-224
             dict(use_relative_position_bias=True, use_absolute_position_embeddings=False,
                  use_mean_pooling=True, layer_scale_init_value=0.1, num_labels=1000),
             dict(_VIT_SMALL)),
    "segformer": ("SegformerForImageClassification", "SegformerConfig",  # mit-b0
                  dict(num_labels=1000), dict(depths=[1, 1, 1, 1])),
    "dinov2": ("Dinov2ForImageClassification", "Dinov2Config",   # dinov2-small
               dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, num_labels=1000),
               dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2)),
    # speech: HuBERT (wav2vec2's encoder); WavLM's gated relative position bias;
    # Speech2Text's strided 1-d convolutions over filter-bank frames
    "hubert": ("HubertForCTC", "HubertConfig",               # hubert-base-ls960
               {}, dict(_WAVE_SMALL)),
    "wavlm": ("WavLMForCTC", "WavLMConfig",                  # wavlm-base-plus
              {}, dict(_WAVE_SMALL)),
    "speech2text": ("Speech2TextForConditionalGeneration", "Speech2TextConfig",
                    # s2t-small-librispeech-asr
                    dict(vocab_size=10000, d_model=256, encoder_layers=12, decoder_layers=6,
                         encoder_attention_heads=4, decoder_attention_heads=4,
                         encoder_ffn_dim=2048, decoder_ffn_dim=2048, max_source_positions=6000,
                         max_target_positions=1024, scale_embedding=True,
                         activation_function="relu", pad_token_id=1, bos_token_id=0,
                         eos_token_id=2, decoder_start_token_id=2),
                    dict(_ED_SMALL, d_model=64, encoder_ffn_dim=256, decoder_ffn_dim=256,
                         conv_channels=128)),
}

# what a model of _HF takes (default: token ids): "seq2seq" token ids and decoder
# ids; "image" pixel values; "speech" log-mel features (Whisper's 2 x its source
# positions frames) and decoder ids; "fbank" filter-bank frames, time first
# (4 per decoder token: Speech2Text's convolutions stride 4 in all), and decoder
# ids; "wave" raw audio (1 s at 16 kHz, 1/4 s small)
_HF_KIND = {"t5-small": "seq2seq", "bart": "seq2seq", "hf-vit": "image",
            "whisper": "speech", "wav2vec2": "wave",
            "marian": "seq2seq", "pegasus": "seq2seq", "mbart": "seq2seq", "flan-t5": "seq2seq",
            "hf-swin": "image", "hf-convnext": "image", "deit": "image", "beit": "image",
            "segformer": "image", "dinov2": "image",
            "hubert": "wave", "wavlm": "wave", "speech2text": "fbank"}


def _hf_build(name: str) -> Callable[[Ctx], nn.Module]:
    def build(ctx: Ctx) -> nn.Module:
        import transformers
        model_cls, cfg_cls, full, small = _HF[name]
        cfg = _hf_config(cfg_cls, full, small, ctx)
        if _HF_KIND.get(name) == "image":
            cfg.image_size = ctx.image()
        return getattr(transformers, model_cls)(cfg)
    return build


def _hf_vocab(name: str, ctx: Ctx) -> int:
    _, cfg_cls, full, small = _HF[name]
    if ctx.small:
        return int(small["vocab_size"])
    if "vocab_size" in full:
        return int(full["vocab_size"])
    return {"BertConfig": 30522, "DistilBertConfig": 30522, "GPT2Config": 50257}[cfg_cls]


def _hf_setting(name: str, key: str, ctx: Ctx) -> Any:
    _, _, full, small = _HF[name]
    return small[key] if ctx.small and key in small else full[key]


def _hf_inputs(name: str) -> Callable[[Ctx, int, torch.Generator], Example]:
    kind = _HF_KIND.get(name, "text")

    def make(ctx: Ctx, bs: int, g: torch.Generator) -> Example:
        low = 3  # skip pad/bos/eos ids (roberta's position ids depend on padding)
        if kind == "image":
            s = ctx.image()
            return Example((), {"pixel_values": _randn(g, bs, 3, s, s)}, _randint(g, 0, 1000, bs))
        if kind == "wave":
            n = 4000 if ctx.small else 16000
            return Example((), {"input_values": _randn(g, bs, n)}, _randn(g, 1))
        v = _hf_vocab(name, ctx)
        s = ctx.seq()
        if kind == "fbank":
            return Example((), {"input_features": _randn(g, bs, 4 * s, 80),
                                "decoder_input_ids": _randint(g, low, v, bs, s)},
                           _randint(g, low, v, bs, s))
        if kind == "speech":
            frames = 2 * _hf_setting(name, "max_source_positions", ctx)
            s = min(s, _hf_setting(name, "max_target_positions", ctx))
            return Example((), {"input_features": _randn(g, bs, 80, frames),
                                "decoder_input_ids": _randint(g, low, v, bs, s)},
                           _randint(g, low, v, bs, s))
        ids = _randint(g, low, v, bs, s)
        labels = _randint(g, low, v, bs, s)
        kwargs: Dict[str, Any] = {"input_ids": ids}
        if kind == "seq2seq":
            kwargs["decoder_input_ids"] = _randint(g, low, v, bs, s)
        return Example((), kwargs, labels)
    return make


def _hf_loss(name: str) -> Callable[[Any, Any], torch.Tensor]:
    kind = _HF_KIND.get(name, "text")
    if kind == "image":
        return classification_loss
    if kind == "wave":       # CTC logits of the frames: their mean square (target unused)
        return lambda out, target: _first_tensor(out).float().square().mean()
    return token_loss


# --------------------------------------------------------------------------
# the registry
# --------------------------------------------------------------------------
def _entries() -> List[ZooEntry]:
    e: List[ZooEntry] = [
        ZooEntry("mlp", "builtin", "builtin", _build_mlp, _inputs_mlp, classification_loss,
                 1024, 64, "3 x (Linear, LayerNorm, GELU) + Linear, 1024 -> 2048 -> 1000"),
        ZooEntry("transformer_block", "builtin", "builtin", _build_tb, _inputs_tb,
                 regression_loss, 32, 2,
                 "pre-LN encoder block, d=768, 12 heads, SDPA, seq 512 (GPU) / 256 (CPU)"),
        ZooEntry("small_resnet", "builtin", "builtin", _build_small_resnet, _inputs_cifar,
                 classification_loss, 256, 16, "CIFAR ResNet, 3 stages x 2 basic blocks, 32x32"),
        ZooEntry("small_vit", "builtin", "builtin", _build_small_vit, _inputs_cifar,
                 classification_loss, 256, 16, "ViT d=192, depth 6, 4x4 patches on 32x32"),
    ]
    for name, bg, bc in (("resnet18", 256, 4), ("resnet50", 128, 2), ("densenet121", 64, 2),
                         ("mobilenet_v2", 128, 4), ("vit_b_16", 64, 2),
                         ("convnext_tiny", 64, 2), ("efficientnet_b0", 128, 4)):
        e.append(ZooEntry(name, "vision", "torchvision", _tv(name), _image_inputs(),
                          classification_loss, bg, bc, f"torchvision.models.{name}(weights=None)"))
    # the same architectures, inputs, loss and batch sizes, without torchvision
    for name, bg, bc, how in (
            ("resnet50", 128, 2, "torchvision's initialisation"),
            ("densenet121", 64, 2, "torchvision's initialisation"),
            ("mobilenet_v2", 128, 4, "torchvision's initialisation"),
            ("vit_b_16", 64, 2, "attention as matmul-softmax-matmul, PyTorch's default init")):
        e.append(ZooEntry(name + "_ours", "vision", "ember.tools.vision", _ours(name), _image_inputs(),
                          classification_loss, bg, bc,
                          f"ember's own definition of torchvision's {name} (ember/tools/vision.py, "
                          f"not torchvision), {how}"))
    for name, bg, bc in (("resnet50", 128, 2), ("vit_base_patch16_224", 64, 2),
                         ("convnext_tiny", 64, 2), ("efficientnet_b0", 128, 4),
                         ("mobilenetv3_large_100", 128, 4)):
        e.append(ZooEntry("timm_" + name, "vision", "timm", _timm(name), _image_inputs(),
                          classification_loss, bg, bc, f"timm.create_model({name!r}, pretrained=False)"))
    for name, bg, bc, grp in (("bert-base", 16, 2, "nlp"), ("gpt2", 16, 2, "nlp"),
                              ("t5-small", 16, 2, "nlp"), ("distilbert", 32, 2, "nlp"),
                              ("roberta", 16, 2, "nlp"), ("albert", 16, 2, "hf"),
                              ("electra", 16, 2, "hf"), ("deberta-v2", 16, 2, "hf"),
                              ("llama", 8, 2, "hf"), ("opt", 16, 2, "hf"), ("gpt-neo", 16, 2, "hf"),
                              ("bart", 16, 2, "hf"), ("hf-vit", 64, 2, "hf"),
                              ("whisper", 16, 2, "hf"), ("wav2vec2", 16, 2, "hf"),
                              ("mobilebert", 32, 2, "hf"), ("mpnet", 16, 2, "hf"),
                              ("funnel", 16, 2, "hf"), ("convbert", 16, 2, "hf"),
                              ("squeezebert", 16, 2, "hf"), ("qwen2", 8, 2, "hf"),
                              ("phi", 8, 1, "hf"), ("gemma", 4, 1, "hf"), ("falcon", 8, 1, "hf"),
                              ("bloom", 8, 2, "hf"), ("gpt-neox", 16, 2, "hf"),
                              ("codegen", 16, 2, "hf"), ("marian", 16, 2, "hf"),
                              ("pegasus", 8, 2, "hf"), ("mbart", 8, 1, "hf"),
                              ("flan-t5", 16, 2, "hf"), ("hf-swin", 64, 2, "hf"),
                              ("hf-convnext", 64, 2, "hf"), ("deit", 64, 2, "hf"),
                              ("beit", 64, 2, "hf"), ("segformer", 64, 2, "hf"),
                              ("dinov2", 64, 2, "hf"), ("hubert", 16, 2, "hf"),
                              ("wavlm", 16, 2, "hf"), ("speech2text", 16, 2, "hf")):
        model_cls, cfg_cls, _, _ = _HF[name]
        e.append(ZooEntry(name, grp, "transformers", _hf_build(name), _hf_inputs(name),
                          _hf_loss(name), bg, bc,
                          f"transformers.{model_cls}({cfg_cls}(...)), random init"))
    return e


REGISTRY: Dict[str, ZooEntry] = {x.name: x for x in _entries()}


def timm_entry(name: str) -> ZooEntry:
    """A zoo entry for any timm model, named on the command line as timm:NAME."""
    return ZooEntry("timm:" + name, "vision", "timm", _timm(name), _image_inputs(),
                    classification_loss, 64, 2, f"timm.create_model({name!r}, pretrained=False)")


def get(name: str) -> ZooEntry:
    if name.startswith("timm:"):
        return timm_entry(name[5:])
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(REGISTRY)} "
                       f"(groups: {', '.join(GROUPS)}; any timm model as timm:NAME)") from None


def group(name: str, only_available: bool = True) -> List[ZooEntry]:
    """A group's entries; ``all`` is builtin + vision + nlp (not the sweeps)."""
    if name not in GROUPS:
        raise KeyError(f"unknown group {name!r}")
    if name in SWEEPS:
        out = [get(n if name != "sweep-timm" else "timm:" + n) for n, _ in SWEEPS[name]]
    else:
        out = [e for e in REGISTRY.values()
               if e.group == name or (name == "all" and e.group in ("builtin", "vision", "nlp"))]
    return [e for e in out if e.available()] if only_available else out


def resolve(spec: str) -> Tuple[List[ZooEntry], List[str]]:
    """Resolve a --models value (comma-separated names and groups) into zoo
    entries, in order, without duplicates.  Returns (entries, notes): group
    members whose package is missing are left out with a note; a model named
    explicitly whose package is missing raises ValueError."""
    out: List[ZooEntry] = []
    notes: List[str] = []
    seen = set()
    for tok in [t.strip() for t in spec.split(",") if t.strip()]:
        if tok in GROUPS:
            members = group(tok, only_available=False)
            missing = sorted({e.source for e in members if not e.available()})
            for src in missing:
                notes.append(f"group {tok!r}: {_REQUIRES[src]} is not importable, "
                             f"its models are left out")
            members = [e for e in members if e.available()]
        else:
            try:
                ent = get(tok)
            except KeyError as ex:
                raise ValueError(str(ex.args[0])) from None
            if not ent.available():
                raise ValueError(f"model {tok!r} needs the package {_REQUIRES[ent.source]!r}, "
                                 f"which is not importable here")
            members = [ent]
        for ent in members:
            if ent.name not in seen:
                seen.add(ent.name)
                out.append(ent)
    return out, notes


def listing() -> str:
    lines = []
    for e in REGISTRY.values():
        ok = "yes" if e.available() else f"no ({_REQUIRES[e.source]} missing)"
        lines.append(f"  {e.name:24s} {e.group:8s} {e.source:13s} batch gpu/cpu "
                     f"{e.batch_gpu:>4d}/{e.batch_cpu:<3d} available: {ok}")
    lines.append("  timm:NAME                any timm model (needs timm)")
    for g, members in SWEEPS.items():
        fams: Dict[str, List[str]] = {}
        for n, fam in members:
            fams.setdefault(fam, []).append(n)
        lines.append(f"group {g} ({len(members)} models"
                     + (", as timm:NAME" if g == "sweep-timm" else "") + "):")
        lines += [f"  {fam:13s} {', '.join(ns)}" for fam, ns in fams.items()]
    return "\n".join(lines)


# --------------------------------------------------------------------------
# memory-bound kernels (--kernels)
# --------------------------------------------------------------------------
@dataclasses.dataclass
class Kernel:
    name: str
    fn: Callable[..., torch.Tensor]
    make: Callable[[bool, bool, torch.dtype, str], Tuple[torch.Tensor, ...]]  # (cuda, small, dtype, device)
    shape_text: Callable[[bool, bool], str]


def _k_sin_cos(x, y):
    return torch.sin(x) + torch.cos(y)


def _k_gelu_affine(x, w, b):
    return F.gelu(x * w + b)


def _k_gelu_ln(x, w, b):
    return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b))


def _k_softmax(x):
    return torch.softmax(0.125 * x, dim=-1)


def _k_sum_inner(x):
    return x.sum(dim=-1)


def _k_sum_outer(x):
    return x.sum(dim=0)


def _kshape(kind: str, cuda: bool, small: bool) -> Tuple[int, ...]:
    if small:   # for tests and quick looks
        return {"vec": (1 << 18,), "rows": (256, 1024), "soft": (256, 1024),
                "square": (512, 512)}[kind]
    if cuda:
        return {"vec": (1 << 28,), "rows": (65536, 1024), "soft": (16384, 4096),
                "square": (8192, 8192)}[kind]
    return {"vec": (1 << 24,), "rows": (16384, 1024), "soft": (2048, 4096),
            "square": (4096, 4096)}[kind]


def _kmaker(kind: str, n_full: int, vec_args: int = 0):
    """n_full: number of full-size inputs; vec_args: number of (last dim) vectors."""
    def make(cuda: bool, small: bool, dtype: torch.dtype, device: str):
        shape = _kshape(kind, cuda, small)
        g = torch.Generator(device=device).manual_seed(0)
        xs = [torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(dtype)
              for _ in range(n_full)]
        vs = [torch.randn(shape[-1], generator=g, device=device, dtype=torch.float32).to(dtype)
              for _ in range(vec_args)]
        return tuple(xs + vs)
    return make


def _ktext(kind: str):
    return lambda cuda, small: "x".join(str(s) if s < 1024 or s % 1024 else
                                        (f"2^{int(math.log2(s))}" if s > 65536 else str(s))
                                        for s in _kshape(kind, cuda, small))


KERNELS: Dict[str, Kernel] = {k.name: k for k in [
    Kernel("sin(x)+cos(y)", _k_sin_cos, _kmaker("vec", 2), _ktext("vec")),
    Kernel("gelu(x*w+b)", _k_gelu_affine, _kmaker("rows", 1, 2), _ktext("rows")),
    Kernel("gelu(layer_norm(x))", _k_gelu_ln, _kmaker("rows", 1, 2), _ktext("rows")),
    Kernel("softmax(0.125*x)", _k_softmax, _kmaker("soft", 1), _ktext("soft")),
    Kernel("sum(x, inner dim)", _k_sum_inner, _kmaker("square", 1), _ktext("square")),
    Kernel("sum(x, outer dim)", _k_sum_outer, _kmaker("square", 1), _ktext("square")),
]}
