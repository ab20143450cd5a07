"""Write a full-size HunyuanOCR-1.0-shaped checkpoint folder without weights, for benchmarks.

``vllm ... --model DIR --load-format dummy`` then runs random weights of the real shape: the same
per-token cost and memory as the published model, so speed and memory measured on it are faithful,
while no weights need to be downloaded (none can be, on the GPU machine). The tokenizer is a stand-in
with the real vocabulary size and special-token ids; text it produces is meaningless.

Usage: ``python -m ocr_ui.shape_checkpoint OUT_DIR [--torchvision-processor]``. Needs only ``tokenizers``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

VOCAB = 120818
BOS, PAD, EOS_A, EOS_B = 120000, 120002, 120007, 120020
IMAGE_START, IMAGE_END, IMAGE, IMAGE_NEWLINE = 120118, 120119, 120120, 120121

TEXT = {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 128, "intermediate_size": 3584}
VISION = {"hidden_size": 1152, "num_hidden_layers": 27, "num_attention_heads": 16, "intermediate_size": 4304}


def _special(name: str) -> str:
    return f"<｜hy_{name}｜>"


def _placeholder(n: int) -> str:
    return f"<｜hy_place▁holder▁no▁{n}｜>"


def _tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    specials = {BOS: _special("begin▁of▁sentence"), PAD: _special("▁pad▁"), 120006: _special("User"),
                EOS_A: _special("Assistant"), EOS_B: _special("end▁of▁sentence")}
    # The image tokens sit at placeholder numbers 100..103 (ids 120118..120121), like the real vocabulary.
    for n in range(800):
        token_id = 120018 + n
        if 120008 <= token_id < VOCAB and token_id not in specials:
            specials[token_id] = _placeholder(n)
    vocab: dict[str, int] = {}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    while len(vocab) < BOS:
        vocab[f"f{len(vocab)}"] = len(vocab)
    for token_id in range(BOS, VOCAB):
        vocab[specials.get(token_id, f"<｜hy_extra_{token_id}｜>")] = token_id
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([v for _, v in sorted(specials.items())])
    tok.save(str(out / "tokenizer.json"))
    # vLLM's HunyuanOCR processor wraps the image token in start/end itself: a template that also emits
    # them double-wraps the image and kills the engine, so the user turn keeps only the image token.
    template = (
        "{{ bos_token }}{% for m in messages %}"
        "{% if m['role'] == 'system' %}{{ m['content'] }}" + _placeholder(3) +
        "{% elif m['role'] == 'user' %}{% if m['content'] is string %}{{ m['content'] }}{% else %}"
        "{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}{% else %}" + _placeholder(102) +
        "{% endif %}{% endfor %}{% endif %}" + _special("User") +
        "{% else %}{{ m['content'] }}" + _special("Assistant") + "{% endif %}{% endfor %}"
    )
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": specials[BOS], "eos_token": specials[EOS_B],
        "pad_token": specials[PAD], "model_max_length": 32768, "chat_template": template,
        "extra_special_tokens": {"image_token": _placeholder(102), "image_start_token": _placeholder(100),
                                 "image_end_token": _placeholder(101)},
    }, ensure_ascii=False, indent=1), encoding="utf-8")


def config() -> dict[str, Any]:
    """The flat config.json of the published 1.0 checkpoint (text keys on top, vision nested)."""
    head_dim = TEXT["head_dim"]
    return {
        "architectures": ["HunYuanVLForConditionalGeneration"], "model_type": "hunyuan_vl", "torch_dtype": "bfloat16",
        "vocab_size": VOCAB, "org_vocab_size": VOCAB, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5,
        "use_qk_norm": True, "hidden_act": "silu", "rope_theta": 10000.0, "attention_bias": False, "mlp_bias": False,
        # Tied like the published model; vLLM 0.26 only trips over it on the pooling path (we pass --runner generate).
        "tie_word_embeddings": True,
        "rope_scaling": {"type": "xdrope", "alpha": 1000.0, "xdrope_section": [head_dim // 8] * 4, "factor": 1.0,
                         "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
        "bos_token_id": BOS, "eos_token_id": [EOS_A, EOS_B], "pad_token_id": PAD, **TEXT,
        "image_token_id": IMAGE, "im_start_id": IMAGE_START, "im_end_id": IMAGE_END, "im_newline_id": IMAGE_NEWLINE,
        "image_start_token_id": IMAGE_START, "image_end_token_id": IMAGE_END, "image_newline_token_id": IMAGE_NEWLINE,
        "video_start_id": 120122, "video_end_id": 120123,
        "vision_config": {"model_type": "hunyuan_vl", "hidden_act": "gelu", "patch_size": 16, "spatial_merge_size": 2,
                          "out_hidden_size": TEXT["hidden_size"], "text_hidden_size": TEXT["hidden_size"],
                          "max_image_size": 2048, "img_max_token_num": 4096, "max_vit_seq_len": 16384,
                          "interpolate_mode": "bilinear", "rms_norm_eps": 1e-5, "num_channels": 3, **VISION},
    }


def build(out_dir: str | Path, *, torchvision_processor: bool = False) -> Path:
    """Write config, tokenizer, processor and generation config into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    _tokenizer(out)
    (out / "config.json").write_text(json.dumps(config(), indent=1), encoding="utf-8")
    processor = "HunYuanVLImageProcessor" if torchvision_processor else "HunYuanVLImageProcessorPil"
    (out / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": processor, "processor_class": "HunYuanVLProcessor", "min_pixels": 512 * 512,
        "max_pixels": 2048 * 2048, "patch_size": 16, "merge_size": 2, "temporal_patch_size": 1, "resample": 1,
        "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
        "do_resize": True, "do_rescale": True, "do_normalize": True, "do_convert_rgb": True}, indent=1), encoding="utf-8")
    (out / "processor_config.json").write_text(json.dumps({"processor_class": "HunYuanVLProcessor"}), encoding="utf-8")
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": BOS, "eos_token_id": [EOS_A, EOS_B], "pad_token_id": PAD, "do_sample": False}), encoding="utf-8")
    return out


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m ocr_ui.shape_checkpoint OUT_DIR [--torchvision-processor]")
    print("wrote", build(sys.argv[1], torchvision_processor="--torchvision-processor" in sys.argv))
