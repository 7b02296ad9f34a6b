"""An exported GGUF file run by llama.cpp (through llama-cpp-python), answering the calls a transformers model gets from
finesweep's evaluation (the logits of every position of a batch of rows), generation and timing (`generate`, greedy),
so the file is measured by the same code as every other variant: test perplexity, answers, milliseconds a token.

llama.cpp runs one sequence at a time here, row after row of a batch, with the same threads as the other variants.
Two contexts on the one (memory-mapped) file: one keeps the logits of every position (what a perplexity needs), the
other only the last one, as a chat server decodes, so its decode speed is llama.cpp's own.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np

from finesweep.trainer.serving.ollama import GGUF_FILE
from finesweep.trainer.serving.onnx_decoder import token_ids

# Context sizes: the smallest power of two from MIN_CONTEXT that holds the longest sequence asked for (the logits of
# every position are kept for a whole context: 4096 positions of a 49k vocabulary are 800 MB).
MIN_CONTEXT = 512


def is_gguf_folder(folder: Path) -> bool:
    return (Path(folder) / GGUF_FILE).is_file()


class GgufCausalLM:
    """A GGUF export loaded by llama.cpp, with the folder's config, generation config and tokenizer beside it."""

    def __init__(self, folder: Path, threads: int | None = None) -> None:
        import torch
        from transformers import AutoConfig, GenerationConfig

        folder = Path(folder)
        self.path = str(folder / GGUF_FILE)
        self.threads = threads or torch.get_num_threads()
        self.config = AutoConfig.from_pretrained(folder)
        self.generation_config = (GenerationConfig.from_pretrained(folder)
                                  if (folder / "generation_config.json").is_file()
                                  else GenerationConfig.from_model_config(self.config))
        self.device = torch.device("cpu")
        self._contexts: dict[bool, Any] = {}

    def eval(self) -> "GgufCausalLM":
        return self

    def llama(self, length: int, all_logits: bool) -> Any:
        """The llama.cpp context for sequences up to `length` tokens (made again, larger, for a longer one)."""
        from llama_cpp import Llama

        context = self._contexts.get(all_logits)
        if context is None or context.n_ctx() < length:
            size = max(MIN_CONTEXT, 1 << max(length - 1, 1).bit_length())
            context = Llama(self.path, n_ctx=size, n_batch=size if all_logits else MIN_CONTEXT,
                            n_threads=self.threads, n_threads_batch=self.threads, logits_all=all_logits,
                            verbose=False)
            self._contexts[all_logits] = context
        return context

    def __call__(self, input_ids: Any, attention_mask: Any = None, **_: Any) -> SimpleNamespace:
        """The logits of every position of the rows (zeros at padding), each row run alone from an empty cache."""
        import torch

        ids = input_ids.cpu().numpy()
        mask = np.ones_like(ids) if attention_mask is None else attention_mask.cpu().numpy()
        logits = np.zeros((*ids.shape, self.config.get_text_config().vocab_size), dtype=np.float32)
        for row, (tokens, kept) in enumerate(zip(ids, mask.astype(bool))):
            positions = np.flatnonzero(kept)
            if len(positions):
                llm = self.llama(len(positions), all_logits=True)
                llm.reset()
                llm.eval(tokens[positions].tolist())
                scores = llm.scores[:len(positions)]
                logits[row, positions, :scores.shape[1]] = scores
        return SimpleNamespace(logits=torch.from_numpy(logits), loss=None)

    def generate(self, input_ids: Any, attention_mask: Any = None, max_new_tokens: int = 20, min_new_tokens: int = 0,
                 eos_token_id: int | Sequence[int] | None = None, pad_token_id: int | None = None,
                 **_: Any) -> Any:
        """Greedy decoding as transformers' `generate(do_sample=False, num_beams=1)` does it, row by row: prompts
        padded on the left, end-of-sequence held off for `min_new_tokens`, a finished row padded to the longest.
        Returns the prompts followed by the new tokens."""
        import torch

        eos = token_ids(eos_token_id if eos_token_id is not None else self.generation_config.eos_token_id)
        pad = pad_token_id if pad_token_id is not None else (eos[0] if eos else 0)
        ids = input_ids.cpu().numpy()
        mask = np.ones_like(ids) if attention_mask is None else attention_mask.cpu().numpy()
        answers = [self._greedy(tokens[kept.astype(bool)].tolist(), max_new_tokens, min_new_tokens, eos)
                   for tokens, kept in zip(ids, mask)]
        width = max((len(answer) for answer in answers), default=0)
        new = np.array([answer + [pad] * (width - len(answer)) for answer in answers], dtype=ids.dtype)
        return torch.from_numpy(np.concatenate([ids, new.reshape(len(ids), width)], axis=1))

    def _greedy(self, prompt: list[int], max_new_tokens: int, min_new_tokens: int, eos: list[int]) -> list[int]:
        """One row's new tokens: the argmax of llama.cpp's last logits, fed back one token at a time."""
        import llama_cpp

        llm = self.llama(len(prompt) + max_new_tokens, all_logits=False)
        llm.reset()
        llm.eval(prompt)
        written: list[int] = []
        for step in range(max_new_tokens):
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
            if step < min_new_tokens and eos:
                logits = logits.copy()
                logits[eos] = -np.inf
            token = int(logits.argmax())
            written.append(token)
            if token in eos or step == max_new_tokens - 1:
                break
            llm.eval([token])
        return written
