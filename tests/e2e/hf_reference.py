"""Greedy reference output of plain transformers ``generate()`` (run with the engine environment's Python).

Usage: python tests/e2e/hf_reference.py MODEL_DIR PROMPT MAX_TOKENS [--image PNG] [--tencent-xdrope]
Prints one JSON line: {"prompt_ids": [...], "ids": [...], "logprobs": [...]} (logprob of each chosen id).

``--tencent-xdrope`` lays XDRoPE's sections over the head dimension the way Tencent's HunYuan code
and vLLM do (the section list repeated: ``xdrope_section * 2``). transformers 5.18-5.24 instead
doubles each section (``[s * 2 for s in sections]``), which differs on image tokens, whose four
position axes differ; on text tokens all axes are equal and the two layouts coincide.
"""

from __future__ import annotations

import argparse
import json


def use_tencent_xdrope_layout() -> None:
    import torch
    import transformers.models.hunyuan_vl.modeling_hunyuan_vl as modeling

    def recomposition_frequencies(self: object, freq: torch.Tensor) -> torch.Tensor:
        sections = list(self.mrope_section)  # type: ignore[attr-defined]
        freq = torch.cat((freq, freq), dim=-1)
        parts = freq.split(sections * 2, dim=-1)
        return torch.cat([part[i % len(sections)] for i, part in enumerate(parts)], dim=-1)

    modeling.HunYuanVLRotaryEmbedding.recomposition_frequencies = recomposition_frequencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("prompt")
    parser.add_argument("max_tokens", type=int)
    parser.add_argument("--image", default=None)
    parser.add_argument("--tencent-xdrope", action="store_true")
    args = parser.parse_args()

    import torch
    from PIL import Image
    from transformers import AutoProcessor, HunYuanVLForConditionalGeneration

    if args.tencent_xdrope:
        use_tencent_xdrope_layout()
    processor = AutoProcessor.from_pretrained(args.model_dir)
    model = HunYuanVLForConditionalGeneration.from_pretrained(args.model_dir, dtype=torch.float32).eval()
    # Like vLLM's ignore_eos: never stop at EOS, and never mask it either (min_new_tokens would).
    model.generation_config.eos_token_id = None
    content: list[dict[str, str]] = [{"type": "image"}] if args.image else []
    messages = [{"role": "system", "content": ""},
                {"role": "user", "content": [*content, {"type": "text", "text": args.prompt}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    images = [Image.open(args.image).convert("RGB")] if args.image else None
    inputs = processor(text=[text], images=images, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=args.max_tokens, do_sample=False, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True)
    prompt_ids = inputs["input_ids"][0].tolist()
    ids = out.sequences[0, len(prompt_ids):].tolist()
    logprobs = [torch.log_softmax(step[0].float(), -1)[token].item() for step, token in zip(out.logits, ids, strict=True)]
    print(json.dumps({"prompt_ids": prompt_ids, "ids": ids, "logprobs": logprobs}))


if __name__ == "__main__":
    main()
