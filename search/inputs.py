"""What a sweep trains on, made ready before the probe: its folder, its data prepared and tokenized per candidate (in
the chat template each one renders with; a GGUF candidate's tokenizer read from the file), and its GGUF candidates
dequantized into plain model folders, in that order: a data or length error is said before a minute of dequantizing."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from finesweep.search.outputs.console import Console
from finesweep.spaces import ModelCandidate, SweepConfig, Task
from finesweep.spaces.files import CACHE_ENV, machine_cache
from finesweep.trainer import data, gguf, models
from finesweep.trainer.data.chat import resolve_template
from finesweep.trainer.data.lengths import covering_length, percentiles, prompt_lengths, token_lengths
from finesweep.trainer.data.tokenizing import replies_cut, replies_cut_error
from finesweep.trainer.models import model_vocab_size


@dataclass
class SweepFolder:
    """Where a sweep keeps everything: <output_root>/<name>/."""

    root: Path

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def tune(self) -> Path:
        return self.root / "tune"

    @property
    def probe_file(self) -> Path:
        return self.cache / "probe.json"

    @property
    def state_file(self) -> Path:
        return self.root / "sweep-state.json"

    @property
    def log_file(self) -> Path:
        """What finesweep and its libraries log at INFO and above, tracebacks included (see search/outputs/logs.py)."""
        return self.root / "finesweep.log"

    def export_dir(self, config: SweepConfig) -> Path:
        return Path(config.export.output_dir) if config.export.output_dir else self.root / "export"


def sweep_folder(config: SweepConfig) -> SweepFolder:
    return SweepFolder(Path(config.output_root).resolve() / config.name)


@dataclass
class PreparedSweep:
    """Data and tokenized splits for every candidate model."""

    prepared: Any  # trainer.data.PreparedData
    tokenized: dict[str, str]
    max_seq_len: int
    lengths: dict[str, dict[str, float]] = field(default_factory=dict)


def dequantize_gguf(config: SweepConfig, console: Console) -> SweepConfig:
    """The config with each GGUF candidate of the space replaced by its dequantized folder in the machine's cache
    (made once per file content on the machine, shared by every sweep; see trainer/gguf.py), so probe, trials and
    export load a plain model folder. The candidate keeps its GGUF file on record (gguf_origin) for the model card.
    A config already resolved (resume, re-export: the saved config is this one) comes back unchanged, unless its
    folder is gone (the cache was cleared): then the folder is made again from the GGUF file."""
    def dequantized(candidate: ModelCandidate, cache: Path) -> ModelCandidate:
        found = gguf.cached_folder(gguf.gguf_path(candidate), cache)
        if found is None:
            console.step(f"Dequantizing GGUF candidate {candidate.name} ({candidate.gguf_file}) into {cache} "
                         f"(once per file on this machine; {CACHE_ENV} sets the folder)")
        candidate = gguf.dequantized_candidate(candidate, cache, found)  # found: no second read of the file
        size = gguf.folder_bytes(Path(candidate.path)) / 2**20
        console.step(f"GGUF candidate {candidate.name}: {'reusing ' if found else ''}its dequantized copy "
                     f"({size:,.0f} MiB) in {candidate.path}; delete {cache / gguf.CACHE_SUBFOLDER} to free the space")
        return candidate

    return _gguf_candidates(config, dequantized)


def tokenizer_candidates(config: SweepConfig) -> SweepConfig:
    """The config the data is tokenized and measured with before any GGUF file is dequantized, so that a length
    that leaves no reply is said in seconds: a GGUF candidate's dequantized copy where this machine has one (its
    folder loads in a second), else the GGUF file itself, whose tokenizer and config transformers reads from its
    metadata alone (SmolLM2-135M: 6 s, against 60 s to dequantize). The copy's tokenizer is the file's, saved
    (trainer/gguf.py), so the tokens are the same either way."""
    def copy_if_made(candidate: ModelCandidate, cache: Path) -> ModelCandidate:
        found = gguf.cached_folder(gguf.gguf_path(candidate), cache)
        return gguf.dequantized_candidate(candidate, cache, found) if found else candidate

    return _gguf_candidates(config, copy_if_made)


def _gguf_candidates(config: SweepConfig, resolve: Callable[[ModelCandidate, Path], ModelCandidate]) -> SweepConfig:
    """The config with `resolve` applied to each GGUF candidate of the space (a resolved one whose folder is gone
    is its GGUF file again), after the check that every GGUF file can be read here."""
    # Where each candidate's weights are on this machine, not a decision about the search.
    config = config.model_copy(update={"models": [gguf.from_lost_folder(m) for m in config.models]})
    gguf.check_gguf(config)
    cache = machine_cache()
    return config.model_copy(update={"models": [
        resolve(m, cache) if m.gguf_file and m.name in config.model_names else m for m in config.models]})


def read_data(config: SweepConfig, folder: SweepFolder):
    """Load, clean, split (cached by content): no model is needed, so a data error surfaces in seconds, before any
    model loads or a GGUF file is dequantized."""
    return data.prepare(config.data, config.seed, folder.cache)


def prepare_data(config: SweepConfig, folder: SweepFolder, console: Console, prepared=None) -> PreparedSweep:
    """Load, clean, split (or take `prepared`, read_data's); then tokenize once per candidate (cached by content).
    The length histogram's PNG is at `prepared.length_plot` (next to report.json), for the parent run."""
    prepared = prepared or read_data(config, folder)
    pairs = config.data.text_pair_column is not None
    tokenizers = {name: models.load_tokenizer(config.candidate(name), config.trust_remote_code, text_pairs=pairs)
                  for name in config.model_names}
    templates = {name: chat_template(config, name, tok) for name, tok in tokenizers.items()}
    measured = {name: token_lengths(prepared.folder, tok, config.data.task, chat_template=templates[name])
                for name, tok in tokenizers.items()}
    lengths = {name: percentiles(values) for name, values in measured.items()}
    max_seq_len = config.data.max_seq_len or max(
        covering_length(lengths[name], _model_limit(tok)) for name, tok in tokenizers.items())
    tokenized, tokens = {}, {}
    for name, tok in tokenizers.items():
        vocab = model_vocab_size(config.candidate(name), config.trust_remote_code)
        tokenized[name] = str(data.tokenize(prepared, tok, config.data.task, max_seq_len, folder.cache,
                                            too_long=config.data.too_long, vocab_size=vocab, model_name=name,
                                            chat_template=templates[name]))
        tokens[name] = data.token_entry(tok, lengths[name], Path(tokenized[name]))
        if config.data.task == Task.causal_lm:
            _check_replies_kept(prepared, tok, templates[name], Path(tokenized[name]), max_seq_len, name)
    data.finish_report(prepared, tokens, measured, max_seq_len)
    console.data_report(prepared.report)
    console.lengths(lengths, max_seq_len)
    return PreparedSweep(prepared, tokenized, max_seq_len, lengths)


def _check_replies_kept(prepared, tokenizer, template: str | None, tokenized: Path, max_seq_len: int, name: str) -> None:
    """A max_seq_len that leaves most conversations no reply token is the user's to fix: said with the prompts'
    lengths (measured only then), before the probe loads the model."""
    sizes = prepared.report.splits
    if cut := replies_cut(tokenized, sizes):
        prompts = percentiles(prompt_lengths(prepared.folder, tokenizer, chat_template=template))
        raise replies_cut_error(cut, sizes, max_seq_len, prompts, name)


def chat_template(config: SweepConfig, model_name: str, tokenizer) -> str | None:
    """The chat template candidate `model_name`'s conversations are rendered with (None: plain text; see
    trainer/data/chat.py); classification has none."""
    if config.data.task != Task.causal_lm:
        return None
    return resolve_template(config.data.chat_template, tokenizer, model_name)


def _model_limit(tokenizer) -> int | None:
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if isinstance(limit, int) and limit < 1_000_000 else None
