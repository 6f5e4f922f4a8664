"""Model definitions for tests/test_models.py (random weights, nothing downloaded).

Two families, each in a CI size ("tiny": seconds per test on two cores) and
a real size ("large", behind ``--runslow``):

- Hugging Face ``transformers`` models built from their Config objects:
  BERT, GPT-2, T5 (encoder-decoder), DistilBERT, RoBERTa.  Dropout is 0 and
  attention is ``eager`` unless asked otherwise, so eager and compiled runs
  compute the same thing.  Each spec knows its task head (masked LM, causal
  LM, seq2seq LM, sequence classification) and builds labelled batches, so
  ``model(**batch).loss`` is the training loss.
- Vision networks defined in ember/tools/vision.py (no torchvision CPU build is
  available; the benchmark zoo builds them too): a ResNet-50-shaped network
  (bottleneck blocks, BatchNorm), a DenseNet-style stack of dense blocks and
  transitions, a MobileNetV2 (inverted residuals, depthwise convolutions,
  ReLU6) and a ViT-B/16-shaped transformer.  They take ``(N, 3, H, W)``
  images and return class logits; their tiny CI configurations, the
  BatchNorm statistics that make eval() matter and the batches are here.

Builders are deterministic given torch's seed; batches come from an explicit
``torch.Generator`` so eager and compiled runs see the same data.
This module is test support only: ember/tools/zoo.py holds the benchmark zoo.
"""
from __future__ import annotations

import dataclasses
import importlib.util
from typing import Callable, Dict

import torch
import torch.nn as nn

from ember.tools.vision import DenseNet, MobileNetV2, ResNet, ViT

HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None


# ==========================================================================
# Hugging Face transformers
# ==========================================================================
@dataclasses.dataclass
class HFSpec:
    """One transformers model: how to build it and its labelled batches."""
    name: str
    build: Callable[[bool, str], nn.Module]        # (large, attn_implementation) -> model
    batch: Callable[[nn.Module, bool, torch.Generator], Dict[str, torch.Tensor]]


def _seq(large: bool):
    """(batch, sequence length) of a batch."""
    return (2, 128) if large else (2, 16)


def _ids(vocab: int, b: int, s: int, g: torch.Generator, low: int = 3) -> torch.Tensor:
    # ids >= 3: clear of the pad/bos/eos ids of every config below
    return torch.randint(low, vocab, (b, s), generator=g)


def _mask(b: int, s: int) -> torch.Tensor:
    """An attention mask with padding at the end of the second sequence."""
    m = torch.ones(b, s, dtype=torch.long)
    if b > 1:
        m[1, s - s // 4:] = 0
    return m


def _mlm_batch(model, large, g):
    b, s = _seq(large)
    v = model.config.vocab_size
    ids = _ids(v, b, s, g)
    labels = torch.full((b, s), -100, dtype=torch.long)
    pick = torch.rand(b, s, generator=g) < 0.3
    pick[:, 0] = True
    labels[pick] = _ids(v, b, s, g)[pick]
    return {"input_ids": ids, "attention_mask": _mask(b, s), "labels": labels}


def _clm_batch(model, large, g):
    b, s = _seq(large)
    ids = _ids(model.config.vocab_size, b, s, g)
    return {"input_ids": ids, "labels": ids.clone()}


def _seq2seq_batch(model, large, g):
    b, s = _seq(large)
    v = model.config.vocab_size
    return {"input_ids": _ids(v, b, s, g), "attention_mask": _mask(b, s),
            "labels": _ids(v, b, max(s // 2, 4), g)}


def _cls_batch(model, large, g):
    b, s = _seq(large)
    return {"input_ids": _ids(model.config.vocab_size, b, s, g), "attention_mask": _mask(b, s),
            "labels": torch.randint(0, model.config.num_labels, (b,), generator=g)}


def _bert(large, attn):
    from transformers import BertConfig, BertForMaskedLM
    size = (dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=512) if large else
            dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=64))
    cfg = BertConfig(**size, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                     attn_implementation=attn)
    return BertForMaskedLM(cfg)


def _roberta(large, attn):
    from transformers import RobertaConfig, RobertaForMaskedLM
    size = (dict(vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, max_position_embeddings=514) if large else
            dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=64, max_position_embeddings=66))
    cfg = RobertaConfig(**size, type_vocab_size=1, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        attn_implementation=attn)
    return RobertaForMaskedLM(cfg)


def _distilbert(large, attn):
    from transformers import DistilBertConfig, DistilBertForSequenceClassification
    size = (dict(vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072,
                 max_position_embeddings=512) if large else
            dict(vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                 max_position_embeddings=64))
    # problem_type set here: transformers sets it on the first call, which
    # would make Dynamo recompile on the second
    cfg = DistilBertConfig(**size, num_labels=3, problem_type="single_label_classification",
                           dropout=0.0, attention_dropout=0.0, seq_classif_dropout=0.0,
                           attn_implementation=attn)
    return DistilBertForSequenceClassification(cfg)


def _gpt2(large, attn):
    from transformers import GPT2Config, GPT2LMHeadModel
    size = (dict(vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024) if large else
            dict(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64))
    cfg = GPT2Config(**size, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=0, eos_token_id=0, attn_implementation=attn)
    m = GPT2LMHeadModel(cfg)
    # transformers finds no loss type in the class name "GPT2LMHeadModel" and
    # logs a warning from inside forward: a graph break under Dynamo
    m.loss_type = "ForCausalLM"
    return m


def _t5(large, attn):
    from transformers import T5Config, T5ForConditionalGeneration
    size = (dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8) if large else
            dict(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2))
    cfg = T5Config(**size, dropout_rate=0.0, relative_attention_num_buckets=32 if large else 8,
                   pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                   attn_implementation=attn)
    return T5ForConditionalGeneration(cfg)


HF_MODELS: Dict[str, HFSpec] = {
    "bert": HFSpec("bert", _bert, _mlm_batch),
    "gpt2": HFSpec("gpt2", _gpt2, _clm_batch),
    "t5": HFSpec("t5", _t5, _seq2seq_batch),
    "distilbert": HFSpec("distilbert", _distilbert, _cls_batch),
    "roberta": HFSpec("roberta", _roberta, _mlm_batch),
}


def build_hf(name: str, large: bool = False, attn: str = "eager") -> nn.Module:
    """A transformers model with random weights (seeded by torch's global RNG)."""
    return HF_MODELS[name].build(large, attn)


def hf_batch(name: str, model: nn.Module, large: bool, g: torch.Generator) -> Dict[str, torch.Tensor]:
    return HF_MODELS[name].batch(model, large, g)


# ==========================================================================
# Vision
# ==========================================================================
def _bn_init(m: nn.Module) -> None:
    """Non-trivial BatchNorm affine parameters, so BN matters in eval()."""
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            with torch.no_grad():
                mod.weight.uniform_(0.5, 1.5)
                mod.bias.uniform_(-0.2, 0.2)


def _bn_stats(m: nn.Module, g: torch.Generator) -> None:
    """Running statistics other than (0, 1), so eval() differs from train()."""
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)


def finish_vision(m: nn.Module) -> nn.Module:
    _bn_init(m)
    with torch.no_grad():
        _bn_stats(m, torch.Generator().manual_seed(1234))
    return m


@dataclasses.dataclass
class VisionSpec:
    name: str
    build: Callable[[bool], nn.Module]
    image: Callable[[bool], int]
    batch: Callable[[bool], int]
    classes: Callable[[bool], int]


def _resnet(large):
    return ResNet((3, 4, 6, 3), 64, 1000) if large else ResNet((2, 1, 1, 1), 8, 10)


def _densenet(large):
    return DenseNet((6, 12, 24, 16), 32, 64, 4, 1000) if large else DenseNet((2, 2), 8, 16, 2, 10)


def _mobilenet(large):
    if large:
        return MobileNetV2()
    return MobileNetV2(width=0.25, setting=((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 1, 2)),
                       last=64, num_classes=10)


def _vit(large):
    return ViT() if large else ViT(image=32, patch=8, dim=32, depth=2, heads=2, num_classes=10)


VISION_MODELS: Dict[str, VisionSpec] = {
    "resnet50": VisionSpec("resnet50", _resnet, lambda L: 224 if L else 32,
                           lambda L: 8 if L else 4, lambda L: 1000 if L else 10),
    "densenet": VisionSpec("densenet", _densenet, lambda L: 128 if L else 32,
                           lambda L: 8 if L else 4, lambda L: 1000 if L else 10),
    "mobilenet_v2": VisionSpec("mobilenet_v2", _mobilenet, lambda L: 224 if L else 32,
                               lambda L: 8 if L else 4, lambda L: 1000 if L else 10),
    "vit_b16": VisionSpec("vit_b16", _vit, lambda L: 224 if L else 32,
                          lambda L: 4 if L else 4, lambda L: 1000 if L else 10),
}


def build_vision(name: str, large: bool = False) -> nn.Module:
    return finish_vision(VISION_MODELS[name].build(large))


def vision_batch(name: str, large: bool, g: torch.Generator):
    """(images, class targets) for one step."""
    s = VISION_MODELS[name]
    n, hw = s.batch(large), s.image(large)
    return (torch.randn(n, 3, hw, hw, generator=g),
            torch.randint(0, s.classes(large), (n,), generator=g))
