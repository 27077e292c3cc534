"""Architectures beyond the zoo: more of transformers, timm and torchvision, for
`benchmarks/zoo.py --wider` to run outside CI (a model nobody here had run is where the
wrong answers were found: timm's attention biases, before the zoo took three of them in).

Each is built at its published size (Hugging Face's large decoders at BERT-base's width
and depth, as the zoo's Llama: their own defaults are billions of parameters); there is
no small size, so `build(name, small=True)` builds the same model. `zoo.build` and
`zoo.relative_error` serve these as they serve the zoo's own.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .zoo import Inputs, Keywords, ZooModel, image_model, import_torchvision, text, timm_model

Builder = Callable[[bool], tuple[nn.Module, Inputs]]

# BERT-base's width and depth, with grouped-query heads where the architecture has them.
_DECODER = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                intermediate_size=2048, vocab_size=32000)
_GQA = dict(_DECODER, num_key_value_heads=4)


def _full(build: Callable[[bool], tuple[nn.Module, Inputs]]) -> Builder:
    return lambda small: build(False)


def _text(model_class: str, config_class: str, config: dict | None = None,
          names: tuple[str, ...] = ("input_ids", "attention_mask")) -> Builder:
    return _full(text(model_class, config_class, {}, config or {}, names))


def _image(model_class: str, config_class: str, config: dict | None = None,
           size: int = 224) -> Builder:
    return _full(image_model(model_class, config_class, {}, config or {}, full_size=size))


def _audio(model_class: str, config_class: str) -> Builder:
    def build(small: bool) -> tuple[nn.Module, Inputs]:
        import transformers
        model = getattr(transformers, model_class)(getattr(transformers, config_class)())
        return Keywords(model, ("input_values",)), [torch.randn(1, 16000)]  # 1 s at 16 kHz
    return build


def _vit_mae(small: bool) -> tuple[nn.Module, Inputs]:
    """ViT-MAE with its patch shuffle's noise as an input: drawn inside, it differs on every
    call, eager against eager."""
    import transformers
    config = transformers.ViTMAEConfig()
    patches = (config.image_size // config.patch_size) ** 2
    return Keywords(transformers.ViTMAEModel(config), ("pixel_values", "noise")), \
        [torch.randn(1, 3, 224, 224), torch.rand(1, patches)]


def _torchvision(name: str, size: int = 224, **kwargs: object) -> Builder:
    def build(small: bool) -> tuple[nn.Module, Inputs]:
        models = import_torchvision().models
        return getattr(models, name)(weights=None, **kwargs), [torch.randn(1, 3, size, size)]
    return build


def _timm(name: str, size: int = 224) -> Builder:
    return _full(timm_model(name, {}, full_size=size))


_TIMM = {
    "levit_256": "vision transformer (hybrid, attention bias)",
    "poolformer_s12": "metaformer (pooling)",
    "mobilevit_s": "vision transformer (hybrid)",
    "efficientformer_l1": "vision transformer (hybrid, attention bias)",
    "ghostnet_100": "convnet (ghost modules)",
    "dla34": "convnet (deep layer aggregation)",
    "hrnet_w18_small": "convnet (high resolution)",
    "cspdarknet53": "convnet (cross stage partial)",
    "dm_nfnet_f0": "convnet (normalizer-free)",
    "res2net50_26w_4s": "convnet (multi-scale residual)",
    "rexnet_100": "convnet (inverted residual)",
    "edgenext_small": "hybrid (convolution and channel attention)",
    "fastvit_t8": "hybrid (re-parameterizable)",
    "vgg16": "convnet (plain)",
    "dpn68": "convnet (dual path)",
    "coatnet_0_rw_224": "hybrid (convolution and attention)",
    "maxvit_tiny_tf_224": "vision transformer (multi-axis)",
    "xcit_tiny_12_p16_224": "vision transformer (cross-covariance)",
    "cait_xxs24_224": "vision transformer (class attention)",
    "pvt_v2_b0": "vision transformer (pyramid)",
    "twins_pcpvt_small": "vision transformer (pyramid)",
    "resmlp_12_224": "mlp-mixer",
    "gmlp_s16_224": "mlp-mixer (gated)",
    "eva02_tiny_patch14_224": "vision transformer (rotary, SwiGLU)",
    "resnest50d": "convnet (split attention)",
    "skresnet18": "convnet (selective kernel)",
    "tresnet_m": "convnet (space to depth)",
    "lcnet_050": "convnet (depthwise)",
    "ese_vovnet19b_dw": "convnet (one-shot aggregation)",
    "focalnet_tiny_srf": "vision transformer (focal modulation)",
    "inception_next_tiny": "metaformer (inception depthwise)",
    "efficientvit_b0": "vision transformer (linear attention)",
    "convmixer_768_32": "convnet (patch mixer)",
    "deit3_small_patch16_224": "vision transformer",
    "swinv2_cr_tiny_224": "vision transformer (windowed)",
    "hgnetv2_b0": "convnet (high performance GPU net)",
    "mambaout_femto": "convnet (gated)",
    "fasternet_t0": "convnet (partial convolution)",
    "hiera_tiny_224": "vision transformer (hierarchical)",
}

_TORCHVISION = {
    "squeezenet1_0": ("convnet (fire modules)", _torchvision("squeezenet1_0")),
    "mnasnet1_0": ("convnet (depthwise, inverted residual)", _torchvision("mnasnet1_0")),
    "regnet_y_400mf": ("convnet (grouped, squeeze-excite)", _torchvision("regnet_y_400mf")),
    "efficientnet_v2_s": ("convnet (inverted residual, squeeze-excite)",
                          _torchvision("efficientnet_v2_s", size=384)),
    "swin_v2_t": ("vision transformer (windowed)", _torchvision("swin_v2_t", size=256)),
    "maxvit_t": ("vision transformer (multi-axis)", _torchvision("maxvit_t")),
    "convnext_tiny": ("convnet", _torchvision("convnext_tiny")),
    "inception_v3": ("convnet (inception)", _torchvision("inception_v3", size=299,
                                                         aux_logits=False, init_weights=True)),
    "densenet121": ("convnet (dense)", _torchvision("densenet121")),
    "resnext50_32x4d": ("convnet (grouped)", _torchvision("resnext50_32x4d")),
    "wide_resnet50_2": ("convnet (residual)", _torchvision("wide_resnet50_2")),
    "mobilenet_v3_large": ("convnet (depthwise, squeeze-excite)",
                           _torchvision("mobilenet_v3_large")),
}

_HF = {
    "electra": ("encoder", _text("ElectraModel", "ElectraConfig")),
    "xlm-roberta": ("encoder", _text("XLMRobertaModel", "XLMRobertaConfig")),
    "mpnet": ("encoder", _text("MPNetModel", "MPNetConfig")),
    "squeezebert": ("encoder (grouped convolutions)",
                    _text("SqueezeBertModel", "SqueezeBertConfig")),
    "funnel": ("encoder (pooled)", _text("FunnelModel", "FunnelConfig")),
    "modernbert": ("encoder (rotary, local attention)",
                   _text("ModernBertModel", "ModernBertConfig")),
    "qwen2": ("decoder", _text("Qwen2Model", "Qwen2Config", _GQA)),
    "mistral": ("decoder", _text("MistralModel", "MistralConfig", _GQA)),
    "phi": ("decoder", _text("PhiModel", "PhiConfig", _DECODER)),
    "gpt-neox": ("decoder (parallel residual)", _text("GPTNeoXModel", "GPTNeoXConfig",
                                                      dict(_DECODER, intermediate_size=3072))),
    "opt": ("decoder", _text("OPTModel", "OPTConfig")),
    "bloom": ("decoder (ALiBi)", _text("BloomModel", "BloomConfig",
                                       dict(hidden_size=768, n_layer=12, n_head=12,
                                            vocab_size=32000))),
    "falcon": ("decoder (parallel attention)", _text(
        "FalconModel", "FalconConfig",
        dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, vocab_size=32000))),
    "gemma": ("decoder", _text("GemmaModel", "GemmaConfig", dict(_GQA, head_dim=64))),
    "gemma2": ("decoder (soft-capped, sliding window)",
               _text("Gemma2Model", "Gemma2Config", dict(_GQA, head_dim=64))),
    "stablelm": ("decoder", _text("StableLmModel", "StableLmConfig", _GQA)),
    "olmo": ("decoder", _text("OlmoModel", "OlmoConfig", _DECODER)),
    "starcoder2": ("decoder", _text("Starcoder2Model", "Starcoder2Config", _GQA)),
    "clip-text": ("encoder (causal)", _text("CLIPTextModel", "CLIPTextConfig")),
    "clip-vision": ("vision transformer", _image("CLIPVisionModel", "CLIPVisionConfig")),
    "siglip-vision": ("vision transformer", _image("SiglipVisionModel", "SiglipVisionConfig")),
    "segformer": ("vision transformer (segmentation)",
                  _image("SegformerModel", "SegformerConfig")),
    "mobilevit": ("vision transformer (hybrid)", _image("MobileViTModel", "MobileViTConfig",
                                                        size=256)),
    "convnextv2": ("convnet", _image("ConvNextV2Model", "ConvNextV2Config")),
    "swinv2": ("vision transformer (windowed)", _image("Swinv2Model", "Swinv2Config")),
    "levit": ("vision transformer (hybrid, attention bias)", _image("LevitModel", "LevitConfig")),
    "data2vec-vision": ("vision transformer",
                        _image("Data2VecVisionModel", "Data2VecVisionConfig")),
    "vit-mae": ("vision transformer", _vit_mae),
    "regnet": ("convnet (grouped, squeeze-excite)", _image("RegNetModel", "RegNetConfig")),
    "poolformer": ("metaformer (pooling)", _image("PoolFormerModel", "PoolFormerConfig")),
    "pvt": ("vision transformer (pyramid)", _image("PvtModel", "PvtConfig")),
    "hiera": ("vision transformer (hierarchical)", _image("HieraModel", "HieraConfig")),
    "data2vec-audio": ("audio encoder", _audio("Data2VecAudioModel", "Data2VecAudioConfig")),
    "hubert": ("audio encoder", _audio("HubertModel", "HubertConfig")),
    "wavlm": ("audio encoder", _audio("WavLMModel", "WavLMConfig")),
}

MODELS: dict[str, ZooModel] = {
    **{f"timm/{name}": ZooModel(f"timm/{name}", family, _timm(name))
       for name, family in _TIMM.items()},
    **{f"tv/{name}": ZooModel(f"tv/{name}", family, build)
       for name, (family, build) in _TORCHVISION.items()},
    **{f"hf/{name}": ZooModel(f"hf/{name}", family, build)
       for name, (family, build) in _HF.items()},
}
