"""vLLM's native HunYuanVL on the tiny checkpoint gives the same greedy output as transformers.

The random weights are scaled so that the next-token distribution is peaked; a mis-mapped tensor, a
wrong vision merger or a wrong rope then changes the output, so identical greedy tokens and logprobs
show that vLLM loads the checkpoint the way transformers does.

Known difference (documented, not hidden): transformers 5.18 lays out XDRoPE's sections over the head
dimension differently from vLLM and Tencent's own code (see tests/e2e/hf_reference.py). On image
prompts that changes the output of this checkpoint: stock transformers differed by up to 1.4 in
logprob and picked other greedy tokens. With transformers switched to the Tencent layout the two agree
(max logprob difference measured 0.008, from vLLM's slightly different position-embedding
interpolation). Text-only prompts, where the layouts coincide, match stock transformers.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.conftest import ROOT, Server
from tests.e2e.media import GREEDY, GREEDY_EXTRA, data_url, page_image

pytestmark = pytest.mark.e2e
PROMPT = "Read the text in the image."
MAX_TOKENS = 24
LOGPROB_TOLERANCE = 0.05  # fp32 on both sides; the image path measured 0.008, text-only ~1e-6


def _transformers(python: Path, model_dir: Path, prompt: str, image_png: Path | None, *, tencent_xdrope: bool) -> dict[str, Any]:
    argv = [str(python), str(ROOT / "tests" / "e2e" / "hf_reference.py"), str(model_dir), prompt, str(MAX_TOKENS)]
    if image_png is not None:
        argv += ["--image", str(image_png)]
    if tencent_xdrope:
        argv.append("--tencent-xdrope")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False,
                          env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _vllm(server: Server, content: list[dict[str, Any]]) -> dict[str, Any]:
    client = openai.OpenAI(base_url=server.base_url, api_key="EMPTY", timeout=120, max_retries=0)
    reply = client.chat.completions.create(
        model=server.settings.model.served_name, max_tokens=MAX_TOKENS, logprobs=True, **GREEDY,
        messages=[{"role": "system", "content": ""}, {"role": "user", "content": content}],
        extra_body={**GREEDY_EXTRA, "return_token_ids": True})
    choice = reply.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    return {"prompt_ids": (reply.model_extra or {})["prompt_token_ids"],
            "ids": (choice.model_extra or {})["token_ids"],
            "logprobs": [t.logprob for t in choice.logprobs.content]}


def _max_logprob_gap(a: dict[str, Any], b: dict[str, Any]) -> float:
    return max(abs(x - y) for x, y in zip(a["logprobs"], b["logprobs"], strict=True))


@pytest.mark.parametrize("label", ["HELLO 42", "Total: 9.99"])
def test_image_prompt_greedy_tokens_match_transformers(vllm_server: Server, tiny_checkpoint: Path,
                                                       tmp_path: Path, label: str) -> None:
    image = page_image(label, (160, 96))
    image_png = tmp_path / "page.png"
    image.save(image_png)
    served = _vllm(vllm_server, [{"type": "image_url", "image_url": {"url": data_url(image)}},
                                 {"type": "text", "text": PROMPT}])
    reference = _transformers(vllm_server.python, tiny_checkpoint, PROMPT, image_png, tencent_xdrope=True)

    assert served["prompt_ids"] == reference["prompt_ids"]  # same template, same image-token expansion
    assert len(served["ids"]) == MAX_TOKENS
    assert served["ids"] == reference["ids"]
    assert _max_logprob_gap(served, reference) < LOGPROB_TOLERANCE


def test_text_only_prompt_matches_stock_transformers(vllm_server: Server, tiny_checkpoint: Path) -> None:
    prompt = "Invoice number, date, total amount."
    served = _vllm(vllm_server, [{"type": "text", "text": prompt}])
    reference = _transformers(vllm_server.python, tiny_checkpoint, prompt, None, tencent_xdrope=False)

    assert served["prompt_ids"] == reference["prompt_ids"]
    assert served["ids"] == reference["ids"]
    assert _max_logprob_gap(served, reference) < 1e-3
