"""The naive baseline: transformers ``generate()`` in-process, at batch 1 and batched, on the bench's pages.

Runs under the ENGINE environment's Python (torch + transformers); torch is imported only inside the
functions so ``ocr_ui.bench`` stays importable in the app's environment. With a checkpoint folder that
has no weight files the model is built from its config with random weights (the same per-token cost:
a speed and memory proxy, like vLLM's ``--load-format dummy``).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from PIL import Image

from ocr_ui.bench_report import Record


def _load(model_dir: str, device: str) -> tuple[Any, Any]:
    import torch
    import transformers
    from transformers import AutoConfig, AutoProcessor

    cls = transformers.HunYuanVLForConditionalGeneration
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    if any(Path(model_dir).glob("*.safetensors")):
        model = cls.from_pretrained(model_dir, dtype=dtype).to(device)
    else:
        with torch.device(device):
            model = cls._from_config(AutoConfig.from_pretrained(model_dir), dtype=dtype)
    return model.eval(), AutoProcessor.from_pretrained(model_dir)


def _prompt_text(processor: Any, prompt: str) -> str:
    messages = [{"role": "system", "content": ""}, {"role": "user", "content": processor.image_token + "\n" + prompt}]
    text = processor.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    # The published template emits only the image token; the processor expects start + image + end.
    if processor.image_start_token not in text:
        text = text.replace(processor.image_token,
                            processor.image_start_token + processor.image_token + processor.image_end_token)
    return text


def run_transformers(model_dir: str, pages: list[tuple[str, Image.Image, int]], *, prompt: str, batch_sizes: list[int],
                     requests: int | None, max_tokens: int, emit: Any) -> list[tuple[int, list[Record], float]]:
    """Per batch size: (batch size, one record per page generated, wall seconds). ``emit`` gets each record.

    ``pages`` are (name, image, image tokens).
    """
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model, processor = _load(model_dir, device)
    text = _prompt_text(processor, prompt)

    def generate(batch: list[Image.Image]) -> float:
        inputs = processor(text=[text] * len(batch), images=batch, return_tensors="pt").to(device)
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():  # min_new_tokens: random weights would stop at random; fix the length
            model.generate(**inputs, max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    generate([pages[0][1]])  # warm-up: kernels, allocator
    levels = []
    for size in batch_sizes:
        records: list[Record] = []
        total = requests or 2 * size
        level_start = time.perf_counter()
        for first in range(0, total, size):
            chosen = [pages[(first + k) % len(pages)] for k in range(min(size, total - first))]
            started = time.perf_counter() - level_start
            try:
                seconds = generate([image for _, image, _ in chosen])
                error = None
            except torch.cuda.OutOfMemoryError:
                seconds, error = None, "out_of_memory"
                torch.cuda.empty_cache()
            for k, (name, _, tokens) in enumerate(chosen):
                rec = Record("transformers", size, first + k, name, started, latency_s=seconds,
                             output_tokens=None if error else max_tokens, image_tokens=tokens, error=error)
                records.append(rec)
                emit(rec)
        levels.append((size, records, time.perf_counter() - level_start))
    if device == "cuda":
        emit({"peak_gpu_memory_mib": torch.cuda.max_memory_allocated() // 2**20})
    return levels
