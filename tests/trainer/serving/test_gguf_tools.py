"""What a GGUF export checks before llama.cpp's tools run, in the default suite (no llama-cpp-python needed): the
converter's place, and a model folder with code of its own, which the converter would run."""

from __future__ import annotations

import json

import pytest

from finesweep.trainer.serving import gguf_export


def test_the_converter_is_looked_for_where_the_set_up_puts_it_or_where_the_variable_says(tmp_path, monkeypatch):
    monkeypatch.setenv(gguf_export.CONVERTER_ENV, str(tmp_path))
    assert gguf_export.converter_home() == tmp_path
    missing = gguf_export.missing_tools()
    assert missing is not None and "bash scripts/setup.sh --gguf" in missing
    monkeypatch.delenv(gguf_export.CONVERTER_ENV)
    assert gguf_export.converter_home() == gguf_export.CONVERTER_HOME


def test_a_folder_naming_code_of_its_own_is_not_converted(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    gguf_export.refuse_custom_code(tmp_path)  # a plain folder passes
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"auto_map": {"AutoTokenizer": ["t.Tok", None]}}))
    with pytest.raises(RuntimeError, match=r"tokenizer_config.json names code of the model's own \(auto_map\)"):
        gguf_export.refuse_custom_code(tmp_path)
