"""A chat sweep through the real CLI: a messages JSONL on an instruct model with a chat template trains on the
assistant turns, exports a tokenizer that carries the template, and `finesweep predict` prompts in that format."""

from __future__ import annotations

import json

from finesweep.trainer.data import chat
from tests import tiny
from tests.sweeps import causal_lm_sweep, finesweep, trial_runs

CHAT_SWEEP = causal_lm_sweep("tiny-chat", 2, "chats.jsonl", "{name: chat, path: model}")


def test_a_messages_jsonl_sweep_trains_on_the_template_and_the_export_prompts_with_it(tmp_path):
    from transformers import AutoTokenizer

    tiny.build_tiny_chat_lm(tmp_path / "model")
    tiny.write_jsonl(tmp_path / "chats.jsonl", tiny.conversation_rows(160))
    (tmp_path / "sweep.yaml").write_text(CHAT_SWEEP)
    result = finesweep("run", "sweep.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "chat tokens: p50" in result.stdout and "conversations as its chat template" in result.stdout
    sweep_dir = tmp_path / "runs" / "tiny-chat"
    runs = trial_runs(sweep_dir)
    assert len(runs) == 2 and all(r.data.metrics["eval_loss"] > 0 for r in runs)
    report = json.loads(next((sweep_dir / "cache" / "data").glob("*/report.json")).read_text())
    assert report["tokens"]["chat"]["chat_template"] == "template"
    export = sweep_dir / "export"
    for variant in ("model", "model-int8"):
        assert chat.own_template(AutoTokenizer.from_pretrained(export / variant)) == tiny.CHATML_TEMPLATE
    predicted = finesweep("predict", str(export / "model"), "name the colour red number 7", cwd=tmp_path)
    assert predicted.returncode == 0, predicted.stderr[-2000:]
    assert "'name the colour red number 7' -> {\"generated\":" in predicted.stdout
