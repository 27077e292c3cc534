"""The model zoo: architectures users deploy, from transformers, timm and torchvision, built
from their configs with random weights (nothing is downloaded).

Each entry builds its model and example inputs in one of two sizes:
- full: the published architecture at batch 1 (benchmarks/zoo.py times these);
- small: the same code with few, narrow layers and small images (the tests' zoo slice).

The libraries are an optional extra, `requirements-zoo.txt`, installed with --no-deps beside
the CPU torch (scripts/setup.sh does it); `missing()` says what is absent.
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

Inputs = list[torch.Tensor]
SEQ = 128  # tokens per sequence in the full size
SMALL_SEQ = 32
PADDING = 8  # masked tokens at the end of each sequence: the mask path is exercised


@dataclass(frozen=True)
class ZooModel:
    name: str  # "<library>/<architecture>"
    family: str
    build: Callable[[bool], tuple[nn.Module, Inputs]]  # small -> model, inputs


def missing() -> str | None:
    """What keeps the zoo from being built here, or None."""
    for module in ("transformers", "timm", "torchvision"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install --no-deps -r requirements-zoo.txt)"
    return None


def import_torchvision() -> types.ModuleType:
    """torchvision, importable beside the CPU torch.

    PyPI's torchvision is a CUDA build: its C++ ops cannot load beside torch's CPU wheel, and
    its __init__ then fails registering fake and autograd kernels for those missing ops. The
    model definitions need neither, so without the ops both registration modules are
    replaced by empty ones (timm imports torchvision too: call this first)."""
    try:
        return importlib.import_module("torchvision")
    except RuntimeError as error:
        if "torchvision::" not in str(error):
            raise
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    for name in ("torchvision._meta_registrations", "torchvision._autograd_registrations"):
        sys.modules[name] = types.ModuleType(name)
    return importlib.import_module("torchvision")


# ---------------------------------------------------------------- Hugging Face


class Keywords(nn.Module):
    """A Hugging Face model called with positional tensors (as tracing does), returning its
    first output (the last hidden state)."""

    def __init__(self, model: nn.Module, names: tuple[str, ...]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.model(**dict(zip(self.names, args, strict=True)))[0]


def _tokens(vocab: int, small: bool, mask: bool = True) -> Inputs:
    seq = SMALL_SEQ if small else SEQ
    ids = torch.randint(0, vocab, (1, seq))
    if not mask:
        return [ids]
    attention = torch.ones(1, seq, dtype=torch.long)
    attention[:, seq - PADDING:] = 0
    return [ids, attention]


def text(model_class: str, config_class: str, small_config: dict, full_config: dict,
          names: tuple[str, ...] = ("input_ids", "attention_mask"),
          decoder: bool = False) -> Callable[[bool], tuple[nn.Module, Inputs]]:
    def build(small: bool) -> tuple[nn.Module, Inputs]:
        import transformers
        config = getattr(transformers, config_class)(**(small_config if small else full_config))
        config.use_cache = False  # inference of one sequence: no key/value cache to return
        model = getattr(transformers, model_class)(config)
        inputs = _tokens(config.vocab_size, small, "attention_mask" in names)
        if decoder:  # encoder-decoder: the decoder reads the first tokens
            inputs.append(inputs[0][:, : inputs[0].shape[1] // 2].clone())
        return Keywords(model, names), inputs
    return build


def _encoder_small(**extra: object) -> dict:
    return dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=128, vocab_size=1000, **extra)


def image_model(model_class: str, config_class: str, small_config: dict, full_config: dict,
                 full_size: int = 224, small_size: int = 64,
                 channels: int = 3) -> Callable[[bool], tuple[nn.Module, Inputs]]:
    def build(small: bool) -> tuple[nn.Module, Inputs]:
        import transformers
        config = getattr(transformers, config_class)(**(small_config if small else full_config))
        size = small_size if small else full_size
        model = getattr(transformers, model_class)(config)
        return Keywords(model, ("pixel_values",)), [torch.randn(1, channels, size, size)]
    return build


def _vit_small(**extra: object) -> dict:
    return {**dict(image_size=64, patch_size=16, hidden_size=64, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=128), **extra}


def _whisper(small: bool) -> tuple[nn.Module, Inputs]:
    import transformers
    if small:
        config = transformers.WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=1,
                                            encoder_attention_heads=4, decoder_attention_heads=4,
                                            encoder_ffn_dim=128, decoder_ffn_dim=128,
                                            max_source_positions=64, vocab_size=1000,
                                            pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                            decoder_start_token_id=1)
    else:  # whisper-base
        config = transformers.WhisperConfig(d_model=512, encoder_layers=6, decoder_layers=6,
                                            encoder_attention_heads=8, decoder_attention_heads=8,
                                            encoder_ffn_dim=2048, decoder_ffn_dim=2048)
    encoder = transformers.WhisperModel(config).get_encoder()
    frames = 2 * config.max_source_positions
    return Keywords(encoder, ("input_features",)), [torch.randn(1, config.num_mel_bins, frames)]


def _wav2vec2(small: bool) -> tuple[nn.Module, Inputs]:
    import transformers
    config = transformers.Wav2Vec2Config(**(_encoder_small(
        conv_dim=(32,) * 7, num_conv_pos_embeddings=16) if small else {}))
    samples = 4000 if small else 16000
    return Keywords(transformers.Wav2Vec2Model(config), ("input_values",)), \
        [torch.randn(1, samples)]


_HF_TEXT = {
    "bert": ("encoder", text("BertModel", "BertConfig", _encoder_small(), {})),
    "roberta": ("encoder", text("RobertaModel", "RobertaConfig", _encoder_small(), {})),
    "distilbert": ("encoder", text("DistilBertModel", "DistilBertConfig",
                                    dict(dim=64, n_layers=2, n_heads=4, hidden_dim=128,
                                         vocab_size=1000), {})),
    "albert": ("encoder", text("AlbertModel", "AlbertConfig",
                                _encoder_small(embedding_size=32),
                                dict(hidden_size=768, num_attention_heads=12,
                                     intermediate_size=3072))),  # albert-base
    "deberta-v2": ("encoder", text(
        "DebertaV2Model", "DebertaV2Config",
        _encoder_small(relative_attention=True, pos_att_type=["p2c", "c2p"],
                       position_buckets=16, max_relative_positions=-1,
                       position_biased_input=False, share_att_key=True,
                       norm_rel_ebd="layer_norm"),
        dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,  # deberta-v3-base
             intermediate_size=3072, relative_attention=True, pos_att_type=["p2c", "c2p"],
             position_buckets=256, max_relative_positions=-1, position_biased_input=False,
             share_att_key=True, norm_rel_ebd="layer_norm", vocab_size=128100))),
    "mobilebert": ("encoder", text("MobileBertModel", "MobileBertConfig",
                                    dict(num_hidden_layers=2, vocab_size=1000), {})),
    "gpt2": ("decoder", text("GPT2Model", "GPT2Config",
                              dict(n_embd=64, n_layer=2, n_head=4, vocab_size=1000), {})),
    "llama": ("decoder", text(  # a Llama-architecture model of BERT-base's width, with GQA
        "LlamaModel", "LlamaConfig",
        dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=128, vocab_size=1000),
        dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
             num_key_value_heads=4, intermediate_size=2048, vocab_size=32000))),
    "t5": ("encoder-decoder", text(
        "T5Model", "T5Config",
        dict(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, vocab_size=1000),
        {}, names=("input_ids", "attention_mask", "decoder_input_ids"), decoder=True)),
    "bart": ("encoder-decoder", text(
        "BartModel", "BartConfig",
        dict(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
             decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
             vocab_size=1000),
        dict(d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
             decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072),  # base
        names=("input_ids", "attention_mask", "decoder_input_ids"), decoder=True)),
}

_HF_VISION = {
    "vit": ("vision transformer", image_model("ViTModel", "ViTConfig", _vit_small(), {})),
    "deit": ("vision transformer", image_model("DeiTModel", "DeiTConfig", _vit_small(), {})),
    "beit": ("vision transformer", image_model("BeitModel", "BeitConfig",
                                                _vit_small(use_relative_position_bias=True),
                                                dict(use_relative_position_bias=True))),
    "dinov2": ("vision transformer", image_model("Dinov2Model", "Dinov2Config",
                                                  _vit_small(patch_size=14, image_size=56),
                                                  dict(image_size=224), small_size=56)),
    "swin": ("vision transformer (windowed)", image_model(
        "SwinModel", "SwinConfig",
        dict(image_size=64, patch_size=4, embed_dim=32, depths=[1, 1], num_heads=[2, 4],
             window_size=4), {})),
    # CvT-13: convolutional projections read as tokens, attention written with einsum.
    # (Its stage i builds its i-th drop-path rate from depth[i] of them: depths rise.)
    "cvt": ("vision transformer (convolutional projections)", image_model(
        "CvtModel", "CvtConfig", dict(depth=[1, 2, 3], embed_dim=[32, 64, 96],
                                      num_heads=[1, 2, 3]), {})),
    "convnext": ("convnet", image_model(
        "ConvNextModel", "ConvNextConfig",
        dict(depths=[1, 1, 1, 1], hidden_sizes=[16, 32, 64, 128]), {})),
    "resnet": ("convnet", image_model(
        "ResNetModel", "ResNetConfig",
        dict(depths=[1, 1, 1, 1], hidden_sizes=[32, 64, 128, 256], embedding_size=16), {})),
    # Its convolutions pad by name (padding="same"): TorchScript's `_convolution_mode`.
    "efficientnet": ("convnet (inverted residual, squeeze-excite)", image_model(
        "EfficientNetModel", "EfficientNetConfig",
        dict(width_coefficient=0.25, depth_coefficient=0.25, image_size=64, hidden_dim=320),
        dict(width_coefficient=1.0, depth_coefficient=1.0, image_size=224,
             hidden_dim=1280))),  # efficientnet-b0
}

_HF_AUDIO = {
    "whisper-encoder": ("audio encoder", _whisper),
    "wav2vec2": ("audio encoder", _wav2vec2),
}


# ---------------------------------------------------------------- timm and torchvision


def timm_model(name: str, small: dict, small_size: int = 64, full_size: int = 224,
          small_name: str | None = None) -> Callable[[bool], tuple[nn.Module, Inputs]]:
    def build(is_small: bool) -> tuple[nn.Module, Inputs]:
        import timm
        model = timm.create_model((small_name or name) if is_small else name, pretrained=False,
                                  **(small if is_small else {}))
        size = small_size if is_small else full_size
        return model, [torch.randn(1, 3, size, size)]
    return build


def _torchvision_vit(small: bool) -> tuple[nn.Module, Inputs]:
    """torchvision's ViT: nn.MultiheadAttention, which in eval mode without gradients runs
    (and traces as) one fast-path op, `_native_multi_head_attention`."""
    models = import_torchvision().models
    if small:
        return models.VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=4,
                                         hidden_dim=64, mlp_dim=128), [torch.randn(1, 3, 64, 64)]
    return models.vit_b_16(weights=None), [torch.randn(1, 3, 224, 224)]


def _torchvision(name: str, small_size: int = 64,
                 **kwargs: object) -> Callable[[bool], tuple[nn.Module, Inputs]]:
    def build(small: bool) -> tuple[nn.Module, Inputs]:
        models = import_torchvision().models
        size = small_size if small else 224
        return getattr(models, name)(weights=None, **kwargs), [torch.randn(1, 3, size, size)]
    return build


_TIMM = {
    "resnet50": ("convnet (residual)", timm_model("resnet50", {})),
    "resnext50_32x4d": ("convnet (grouped)", timm_model("resnext50_32x4d", {})),
    "repvgg_a2": ("convnet (re-parameterizable)", timm_model("repvgg_a2", {})),
    "efficientnet_b0": ("convnet (inverted residual, squeeze-excite)",
                        timm_model("efficientnet_b0", {})),
    "efficientnetv2_rw_s": ("convnet (inverted residual, squeeze-excite)",
                            timm_model("efficientnetv2_rw_s", {})),
    "mobilenetv3_large_100": ("convnet (depthwise, squeeze-excite)",
                              timm_model("mobilenetv3_large_100", {})),
    "regnety_016": ("convnet (grouped, squeeze-excite)", timm_model("regnety_016", {})),
    "densenet121": ("convnet (dense)", timm_model("densenet121", {})),
    "inception_v3": ("convnet (inception)", timm_model("inception_v3", {}, small_size=96,
                                                  full_size=299)),
    "convnext_tiny": ("convnet", timm_model("convnext_tiny", dict(depths=(1, 1, 1, 1)))),
    "mixer_b16_224": ("mlp-mixer", timm_model("mixer_b16_224", dict(img_size=64),
                                       small_name="mixer_s16_224")),
    "vit_base_patch16_224": ("vision transformer",
                             timm_model("vit_base_patch16_224", dict(img_size=64, depth=2))),
    "swin_tiny_patch4_window7_224": ("vision transformer (windowed)", timm_model(
        "swin_tiny_patch4_window7_224",
        dict(embed_dim=24, depths=(1, 1, 1, 1), num_heads=(1, 2, 2, 4)), small_size=224)),
    # Attention with a learned (heads, N, N) bias, `attention_biases[:, attention_bias_idxs]`;
    # their resolution and windows fix the token counts, so the small ones keep 224 px.
    "tiny_vit_5m_224": ("vision transformer (windowed, attention bias)", timm_model(
        "tiny_vit_5m_224", dict(depths=(1, 1, 1, 1)), small_size=224)),
    "efficientformerv2_s0": ("vision transformer (hybrid, attention bias)", timm_model(
        "efficientformerv2_s0", dict(depths=(1, 1, 2, 2)), small_size=224)),
    "levit_128s": ("vision transformer (hybrid, attention bias)", timm_model(
        "levit_128s", dict(depth=(1, 1, 1)), small_size=224)),
}

_TORCHVISION = {
    "resnet50": ("convnet (residual)", _torchvision("resnet50")),
    "mobilenet_v2": ("convnet (depthwise, inverted residual)", _torchvision("mobilenet_v2")),
    "shufflenet_v2_x1_0": ("convnet (grouped, channel shuffle)",
                           _torchvision("shufflenet_v2_x1_0")),
    "googlenet": ("convnet (inception)", _torchvision("googlenet", aux_logits=False,
                                                      init_weights=True)),
    "vit_b_16": ("vision transformer", _torchvision_vit),
}

MODELS: dict[str, ZooModel] = {
    f"{library}/{name}": ZooModel(f"{library}/{name}", family, build)
    for library, table in (("hf", _HF_TEXT), ("hf", _HF_VISION), ("hf", _HF_AUDIO), ("timm", _TIMM),
                           ("tv", _TORCHVISION))
    for name, (family, build) in table.items()
}


_NORMS = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm)


@torch.no_grad()
def _vary_constant_parameters(model: nn.Module) -> None:
    """Give random values to the parameters the libraries initialise to one constant.
    Left so, a fused op could read them wrongly unseen: zero biases and position tables,
    unit norm scales (a gamma broadcast along the wrong dim), and the zero last norm of
    each residual branch (timm's ResNets and RegNets) or the zero classifier (timm's
    MLP-Mixer), which make whole branches, or the whole output, zero."""
    for module in model.modules():
        for param_name, param in module.named_parameters(recurse=False):
            if param.numel() < 2 or not param.is_floating_point():
                continue
            flat = param.flatten()
            if not bool((flat == flat[0]).all()):
                continue
            if isinstance(module, _NORMS) and param_name == "weight":
                param.uniform_(0.5, 1.5)
            else:
                param.add_(torch.randn_like(param), alpha=0.1)


def lookup(name: str) -> ZooModel:
    """The zoo model `name`, or the wider list's (wider_zoo)."""
    if name in MODELS:
        return MODELS[name]
    from . import wider_zoo  # it builds on this module
    return wider_zoo.MODELS[name]


def build(name: str, small: bool, seed: int = 0) -> tuple[nn.Module, Inputs]:
    """The zoo model `name` (or the wider list's), in eval mode without gradients, and its
    example inputs, with BatchNorm statistics of their own (see _measure_batch_norms)."""
    import_torchvision()  # before timm or transformers import it
    torch.manual_seed(seed)
    model, inputs = lookup(name).build(small)
    _vary_constant_parameters(model)
    _measure_batch_norms(model, inputs)
    return model.eval().requires_grad_(False), inputs


@torch.no_grad()
def _measure_batch_norms(model: nn.Module, inputs: Inputs) -> None:
    """BatchNorm statistics from one pass in training mode over the inputs and a random
    second sample (a batch of one has no variance where the spatial size reaches 1), so that
    folding them into convolutions is not a no-op.

    The means are the batch's, exactly. The default momentum would leave them and the
    variances 81% at their initial 0 and 1 after two passes: the norms then hardly
    normalize, activations grow through the depth, and efficientnetv2_rw_s's 15-block stage
    amplified rounding until eager fp32 was 9% away from fp64. Each variance is the batch's
    plus 1: a channel constant over the batch (after a dead ReLU) has a variance near 0, and
    normalized by it, its rounding noise would become unit-sized signal on which any two fp32
    evaluations disagree. So made, the eager fp32 output of every zoo model with BatchNorm
    is within 1e-6 of fp64's at the published sizes (relative to its largest magnitude)."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.momentum = None  # a cumulative average: after one batch, that batch's statistics
        m.reset_running_stats()
    model.train()
    model(*[torch.cat([t, torch.randn_like(t) if t.is_floating_point() else t])
            for t in inputs])
    for m, momentum in zip(norms, momenta, strict=True):
        m.momentum = momentum
        m.running_var.add_(1)


def at_another_size(inputs: Inputs) -> Inputs:
    """The inputs a deployed model meets after the one it was traced with: token ids and
    masks 3 tokens shorter (the first ones dropped, so the masked end stays), images and
    mel features in a batch of two, waveforms a quarter shorter."""
    generator = torch.Generator().manual_seed(1)
    other = []
    for t in inputs:
        if not t.is_floating_point():
            other.append(t[..., 3:].clone())
        elif t.dim() == 2:
            other.append(t[..., : t.shape[-1] * 3 // 4].clone())
        else:
            other.append(torch.cat([t, torch.randn(t.shape, generator=generator)]))
    return other


def relative_error(out: torch.Tensor, reference: torch.Tensor) -> float:
    """max |out - reference| over max |reference|, in float64 (NaN where they differ in
    NaN positions: any NaN pair compares unequal to its own position's)."""
    out, reference = out.double(), reference.double()
    if not torch.equal(out.isnan(), reference.isnan()):
        return float("nan")
    finite = ~reference.isnan()
    scale = reference[finite].abs().max().item() if finite.any() else 0.0
    return (out[finite] - reference[finite]).abs().max().item() / max(scale, 1e-30)


# fp32: the fused result within this relative error of eager's.
FP32_TOLERANCE = 1e-4
# bf16: the fused result no further from eager fp32 than this many times eager bf16 is.
BF16_FACTOR = 2.0
