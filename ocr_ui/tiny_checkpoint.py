"""Build a tiny, randomly initialised HunyuanOCR-shaped checkpoint (``HunYuanVLForConditionalGeneration``).

``python -m ocr_ui.tiny_checkpoint OUT_DIR`` with the *engine* environment's Python (it needs torch,
transformers >= 5.13 with ``models/hunyuan_vl``, tokenizers and safetensors; nothing is downloaded).
It takes a few seconds and writes ~2 MB: a flat ``config.json`` like the published one, a byte-level
BPE tokenizer whose first ids are the real HunyuanOCR special-token strings, the chat template, the
image-processor and processor configs, and random weights in the original key layout (``vit.*``,
``model.*``) that vLLM's native loader expects. The real sizes are scaled down, except where vLLM's
CPU build has limits: attention head size 32 (its CPU attention has no kernel for 16).

Imports nothing from ``ocr_ui`` but the dependency-free errors module (it runs where gradio and
pydantic are absent).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ocr_ui.errors import OcrError

# Real HunyuanOCR special-token strings, at small ids.
SPECIALS = (
    "<｜hy_▁pad▁｜>",                 # 0 pad
    "<｜hy_begin▁of▁sentence｜>",     # 1 bos
    "<｜hy_place▁holder▁no▁2｜>",     # 2 eos
    "<｜hy_place▁holder▁no▁3｜>",     # 3 end of the system prompt
    "<｜hy_User｜>",                  # 4 end of the user turn: generation starts after it
    "<｜hy_Assistant｜>",             # 5
    "<｜hy_place▁holder▁no▁100｜>",   # 6 image start
    "<｜hy_place▁holder▁no▁101｜>",   # 7 image end
    "<｜hy_place▁holder▁no▁102｜>",   # 8 image placeholder (the processor expands it)
    "<｜hy_place▁holder▁no▁103｜>",   # 9 image row break
)
PAD, BOS, EOS, SEP, USER, ASSISTANT, IMG_START, IMG_END, IMG, IMG_NL = range(len(SPECIALS))
VOCAB_SIZE = 512
HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 128, 4, 2, 32
# 16 px patches merged 2x2: sizes are multiples of 32. A small pixel budget keeps the vision tower
# cheap: a 96x64 image is a 4x6 patch grid and 10 image tokens.
MIN_PIXELS, MAX_PIXELS = 32 * 32, 128 * 128
# Weight scale: large enough that the next-token distribution is peaked (top tokens ~1 logprob apart),
# so a mis-loaded tensor visibly changes greedy output; at 0.02 every logprob is ~-5.6 +- 0.01 and a
# comparison with transformers could not tell a broken load from a correct one.
WEIGHT_STD = 0.2

_IMAGE = SPECIALS[IMG_START] + SPECIALS[IMG] + SPECIALS[IMG_END]
_TEXT_OF = ("{%- if message['content'] is string -%}{{- message['content'] -}}"
            "{%- else -%}{%- for c in message['content'] -%}{%- if c['type'] == 'text' -%}{{- c['text'] -}}"
            "{%- endif -%}{%- endfor -%}{%- endif -%}")
# HunyuanOCR's layout: bos, [system + no_3], user content (image first) + <hy_User>. Accepts plain
# strings and OpenAI content lists; vLLM detects it as the "openai" content format.
CHAT_TEMPLATE = (
    "{{- bos_token -}}{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}" + _TEXT_OF + SPECIALS[SEP]
    + "{%- elif message['role'] == 'user' -%}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{%- for c in message['content'] -%}"
    "{%- if c['type'] == 'image' or c['type'] == 'image_url' or 'image' in c -%}" + _IMAGE
    + "{%- elif c['type'] == 'text' -%}{{- c['text'] -}}{%- endif -%}{%- endfor -%}{%- endif -%}" + SPECIALS[USER]
    + "{%- elif message['role'] == 'assistant' -%}" + _TEXT_OF + SPECIALS[EOS]
    + "{%- endif -%}{%- endfor -%}"
)
_CORPUS = (
    "Recognize the text in the image. Extract all text, tables and formulas.",
    "The quick brown fox jumps over the lazy dog. 0123456789",
    "Hello world! This is a tiny test tokenizer for an OCR model.",
    "Invoice number, date, total amount, address, name, page, line, table.",
    "文字识别 图片 表格 公式 提取 文本",
)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")


def build_tokenizer(out: Path) -> int:
    """Train a byte-level BPE in-process (special tokens first); returns its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(_CORPUS) * 50, trainer=trainer)
    for i, special in enumerate(SPECIALS):
        if tok.token_to_id(special) != i:
            raise OcrError(f"special token {special} got id {tok.token_to_id(special)}, not {i}")
    tok.save(str(out / "tokenizer.json"))
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    _write_json(out / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 2048,
        "bos_token": SPECIALS[BOS], "eos_token": SPECIALS[EOS], "pad_token": SPECIALS[PAD],
        "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
        # HunYuanVLProcessor refuses to start without these tokenizer attributes.
        "extra_special_tokens": {"image_token": SPECIALS[IMG], "image_start_token": SPECIALS[IMG_START],
                                 "image_end_token": SPECIALS[IMG_END]},
        "chat_template": CHAT_TEMPLATE,
    })
    _write_json(out / "special_tokens_map.json",
                {"bos_token": SPECIALS[BOS], "eos_token": SPECIALS[EOS], "pad_token": SPECIALS[PAD]})
    return int(tok.get_vocab_size())


def processor_configs() -> dict[str, dict[str, Any]]:
    """preprocessor_config.json and processor_config.json contents."""
    return {
        "preprocessor_config.json": {
            "image_processor_type": "HunYuanVLImageProcessor", "processor_class": "HunYuanVLProcessor",
            "do_resize": True, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
            "do_convert_rgb": True,
            "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
            "patch_size": 16, "temporal_patch_size": 1, "merge_size": 2,
            "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS,
            "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        },
        "processor_config.json": {"processor_class": "HunYuanVLProcessor"},
    }


def model_config(vocab_size: int) -> dict[str, Any]:
    """The flat HunyuanOCR-style config.json: text fields at top level, a nested vision_config."""
    text = {
        "vocab_size": vocab_size, "org_vocab_size": vocab_size,
        "hidden_size": HIDDEN, "intermediate_size": 256, "num_hidden_layers": 2,
        "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM, "attention_head_dim": HEAD_DIM,
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "use_qk_norm": True,
        "rms_norm_eps": 1e-5, "max_position_embeddings": 32768, "rope_theta": 10000.0,
        # xdrope: 4 axes (position, width, height, image index); sections sum to head_dim / 2.
        "rope_scaling": {"alpha": 1000.0, "beta_fast": 32, "beta_slow": 1, "factor": 1.0, "mscale": 1.0,
                         "mscale_all_dim": 1.0, "type": "xdrope", "xdrope_section": [HEAD_DIM // 8] * 4},
        "tie_word_embeddings": True, "use_cache": True, "initializer_range": 0.02,
        "bos_token_id": BOS, "eos_token_id": EOS, "eod_token_id": EOS, "sep_token_id": SEP,
        "pad_token_id": PAD, "pad_id": PAD,
    }
    vision = {
        "hidden_act": "gelu", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2,
        "num_hidden_layers": 1, "num_channels": 3, "patch_size": 16, "spatial_merge_size": 2,
        "temporal_patch_size": 1, "interpolate_mode": "bilinear", "rms_norm_eps": 1e-5,
        "out_hidden_size": HIDDEN, "text_hidden_size": HIDDEN,
        # max_image_size sizes the learned position table ((max / patch)^2 + 1 rows).
        "max_image_size": 256, "min_image_size": 32, "img_max_token_num": 256, "max_vit_seq_len": 1024,
        "anyres_vit_max_image_size": 256, "cat_extra_token": 1, "add_patchemb_bias": True,
    }
    return {
        "architectures": ["HunYuanVLForConditionalGeneration"], "model_type": "hunyuan_vl",
        **text, "vision_config": vision,
        "image_token_id": IMG, "image_start_token_id": IMG_START, "image_end_token_id": IMG_END,
        "image_newline_token_id": IMG_NL, "im_start_id": IMG_START, "im_end_id": IMG_END,
        "im_newline_id": IMG_NL, "video_start_id": IMG_START, "video_end_id": IMG_END,
        "torch_dtype": "float32",
    }


def build_weights(out: Path, config: dict[str, Any], seed: int) -> int:
    """Random weights saved in the original HunyuanOCR key layout; returns the parameter count."""
    import torch
    from transformers import HunYuanVLConfig, HunYuanVLForConditionalGeneration

    torch.manual_seed(seed)
    model = HunYuanVLForConditionalGeneration(HunYuanVLConfig(**json.loads(json.dumps(config))))
    model = model.to(torch.float32).eval()
    with torch.no_grad():
        # transformers leaves some tensors uninitialised (torch.empty): make every one finite and small.
        for name, param in model.named_parameters():
            if ("norm" in name or "_rms" in name) and name.endswith(".weight"):
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.zero_()
            else:
                param.normal_(0.0, WEIGHT_STD)
        # Zero the tied embedding rows of the special tokens: their logits become 0, so greedy decoding
        # emits printable tokens instead of e.g. <hy_User>, which the server strips (empty stream).
        model.get_input_embeddings().weight[: len(SPECIALS)] = 0.0
    # transformers >= 5 reverts its own key renaming on save, giving the vit.* / model.* layout.
    model.save_pretrained(str(out), safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def build(out_dir: str | Path, *, seed: int = 0) -> Path:
    """Write the whole checkpoint into ``out_dir`` (created if missing)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vocab_size = build_tokenizer(out)
    for name, data in processor_configs().items():
        _write_json(out / name, data)
    config = model_config(vocab_size)
    build_weights(out, config, seed)
    # save_pretrained wrote transformers' nested config; put the flat published layout back (vLLM's
    # HunYuanVLConfig and transformers both read it).
    _write_json(out / "config.json", config)
    _write_json(out / "generation_config.json",
                {"bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD, "do_sample": False})
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m ocr_ui.tiny_checkpoint OUT_DIR [--seed N]``."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m ocr_ui.tiny_checkpoint", description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="folder to write the checkpoint into")
    parser.add_argument("--seed", type=int, default=0, help="random seed of the weights (default 0)")
    args = parser.parse_args(argv)
    out = build(args.out_dir, seed=args.seed)
    print(f"tiny checkpoint written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
