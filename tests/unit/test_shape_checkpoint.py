"""The full-size shape checkpoint (for dummy-weight GPU benchmarks) has the published model's shape."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer

from ocr_ui.shape_checkpoint import IMAGE, VOCAB, build


def test_shape_checkpoint_has_the_published_shape_and_token_ids(tmp_path: Path) -> None:
    out = build(tmp_path / "ckpt")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["HunYuanVLForConditionalGeneration"]
    assert (cfg["num_hidden_layers"], cfg["num_key_value_heads"], cfg["head_dim"]) == (24, 8, 128)
    assert sum(cfg["rope_scaling"]["xdrope_section"]) == cfg["head_dim"] // 2
    assert cfg["vision_config"]["out_hidden_size"] == cfg["hidden_size"]
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.get_vocab_size() == VOCAB
    assert tok.token_to_id("<｜hy_place▁holder▁no▁102｜>") == IMAGE == cfg["image_token_id"]
    assert not list(out.glob("*.safetensors")), "no weights: the engine loads dummy ones"


def test_chat_template_emits_only_the_image_token_for_an_image_part(tmp_path: Path) -> None:
    from jinja2 import Template

    out = build(tmp_path / "ckpt")
    tc = json.loads((out / "tokenizer_config.json").read_text())
    rendered = Template(tc["chat_template"]).render(
        bos_token=tc["bos_token"],
        messages=[{"role": "user", "content": [{"type": "image_url"}, {"type": "text", "text": "Read."}]}],
    )
    assert "no▁102" in rendered and "no▁100" not in rendered and rendered.endswith("Read.<｜hy_User｜>")
