"""A causal LM exported for ONNX Runtime with int8 weights: the CPU deployment path for chat models that decodes
faster than the PyTorch model, with the same perplexity.

transformers' own exporter (`transformers.exporters`) writes the float graph: `decompose_for_generation` captures
the forward call `generate` makes on the key/value cache, with `multi_token_decode` so that one graph serves both
the prefill (the prompt on an empty cache) and every decoding step (one token on the cache), batch and lengths
dynamic. ONNX Runtime's `MatMulNBitsQuantizer` then stores every linear layer's weights in int8, per block of 16
input features, and computes with int8 activations quantized per block (`accuracy_level` 4): the path ONNX
Runtime's own LLM tooling takes. Why not `quantize_dynamic`, as for the classifier: it quantizes each activation
tensor with one scale, and an LLM's activations have outlier features; measured on SmolLM2-135M it raised the
test perplexity by 84% (benchmarks/README.md, "The LLM example's model"), blockwise int8 not at all.

The folder holds model.onnx with its weights beside it (model.onnx.data), export.json (the exporter's manifest, so
`transformers.exporters.ExportedModel.from_pretrained` opens it too), config.json, generation_config.json and the
tokenizer. `OnnxCausalLM` runs the graph in an InferenceSession and decodes greedily over the cache, answering the
calls the export's evaluation (logits of whole rows), generation and timing make on a transformers model.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import numpy as np

from finesweep.spaces import Task
from finesweep.trainer.models import copy_tokenizer, load_checkpoint
from finesweep.trainer.serving.onnx_runtime import EXPORTER_LOGGER, ONNX_FILE, cpu_session, quiet

log = logging.getLogger(__name__)

# The graph's inputs that are not the cache. Every other input is a cache tensor, `input.<container>.layers.<i>.keys`
# (or `.values`), fed back from the output `output.<container>.layers.<i>.keys`: the exporter names the container after
# the forward argument (`past_key_values` up to transformers 5.23, `cache` from 5.24), so names are read from the graph.
TOKEN_INPUTS = ("input_ids", "attention_mask", "position_ids")
# ONNX element types of a cache tensor, as ONNX Runtime spells them, to numpy's.
CACHE_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}
CACHE_VARYING_AXES = (0, 2)  # batch and length; heads and head size are the model's
# transformers' exporter warns through it that it is experimental and which versions it was tested with.
TRANSFORMERS_EXPORTER_LOGGER = "transformers.exporters"
# The prompts generation is captured on: two rows of different lengths, the shorter one padded on the left as a
# batch is for generation, so the graph takes an attention mask and no dimension is specialised to 1.
EXAMPLE_LENGTHS = (6, 9)
# MatMulNBits: 8-bit weights in blocks of 16 input features, symmetric; accuracy level 4 = int8 compute. Measured on
# SmolLM2-135M's test split (benchmarks/quantize/): blocks of 32 raised the perplexity 1.9%, blocks of 16 did not
# (-0.4%), for 1 ms more per generated token (25 against 24, full precision 69).
WEIGHT_BITS, BLOCK_SIZE, ACCURACY_LEVEL = 8, 16, 4


def export_int8(full_dir: Path, out_dir: Path) -> Path:
    """The full-precision causal LM in `full_dir` exported to ONNX with its key/value cache, its linear layers in
    int8, saved with its configs and tokenizer in `out_dir`; returns `out_dir`."""
    with tempfile.TemporaryDirectory(prefix="finesweep-onnx-") as scratch:
        export_float(Path(full_dir), Path(scratch))
        quantized_folder(Path(scratch), Path(out_dir), Path(full_dir))
    log.info("%s: saved onnx-int8 (with its key/value cache) to %s", Path(full_dir).name, out_dir)
    return Path(out_dir)


def quantized_folder(float_dir: Path, out_dir: Path, full_dir: Path, bits: int = WEIGHT_BITS) -> Path:
    """`float_dir`'s graph (export_float's) with `bits`-bit weights in `out_dir`, beside the exporter's manifest, the
    configs and `full_dir`'s tokenizer."""
    out_dir.mkdir(parents=True, exist_ok=True)
    quantize_weights(float_dir / ONNX_FILE, out_dir / ONNX_FILE, bits)
    for name in ("export.json", "config.json", "generation_config.json"):
        if (float_dir / name).is_file():
            (out_dir / name).write_bytes((float_dir / name).read_bytes())
    copy_tokenizer(full_dir, out_dir)
    return out_dir


def export_float(full_dir: Path, folder: Path) -> None:
    """transformers' exporter on the model's generation step, float32, saved in `folder`."""
    import torch
    from transformers.exporters import OnnxConfig, OnnxExporter
    from transformers.exporters.utils import decompose_for_generation

    model = load_checkpoint(str(full_dir), Task.causal_lm, dtype=torch.float32).eval()
    stage, inputs = decompose_for_generation(model, _example_prompts(model), multi_token_decode=True)["decode"]
    progress = io.StringIO()
    # The exporter's notices (it is experimental; torch.onnx's progress lines) go to the log, not the user's console.
    with quiet(EXPORTER_LOGGER), quiet(TRANSFORMERS_EXPORTER_LOGGER), warnings.catch_warnings(), \
            contextlib.redirect_stdout(progress):
        warnings.simplefilter("ignore", FutureWarning)
        exported = OnnxExporter().export(stage, inputs, OnnxConfig(dynamic_shapes=dynamic_shapes(inputs)))
    log.debug("transformers' exporter: %s", progress.getvalue().strip())
    exported.generation_config = model.generation_config
    exported.save_pretrained(folder)


def dynamic_shapes(inputs: dict[str, Any]) -> dict[str, Any]:
    """torch.export's dynamic axes for the generation step's inputs: batch and lengths vary, a cache's heads and
    head size do not. Marking only those (instead of every axis, `dynamic=True`) keeps the fixed sizes out of the
    symbolic-shape solver: it exports faster and the graph states its fixed dimensions."""
    import torch
    from transformers.exporters.exporter_dynamo import get_auto_dynamic_shapes

    def cache_axes(spec: Any) -> Any:  # the exporter's every-axis spec of the cache, tensor by tensor
        if isinstance(spec, dict):  # one cache tensor: [batch, heads, length, head size]
            return {axis: dim for axis, dim in spec.items() if axis in CACHE_VARYING_AXES}
        return [cache_axes(child) for child in spec] if isinstance(spec, (list, tuple)) else spec

    return {name: get_auto_dynamic_shapes(value) if isinstance(value, torch.Tensor)
            else cache_axes(get_auto_dynamic_shapes(value))
            for name, value in inputs.items() if isinstance(value, torch.Tensor) or hasattr(value, "layers")}


def quantize_weights(graph: Path, out: Path, bits: int = WEIGHT_BITS) -> None:
    """Every MatMul on a weight to MatMulNBits (`bits` per weight, in blocks), the tied output head and Gemm layers
    included (benchmarks/quantize/llm.py also measures 4 bits)."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(str(graph))
    _fold_weight_transposes(model)
    _split_weight_gemms(model)
    quantizer = MatMulNBitsQuantizer(model, bits=bits, block_size=BLOCK_SIZE, is_symmetric=True,
                                     accuracy_level=ACCURACY_LEVEL)
    with quiet("onnxruntime.quantization"):  # one INFO line per layer
        quantizer.process()
    quantizer.model.save_model_to_file(str(out), use_external_data_format=True)


def _fold_weight_transposes(model: Any) -> None:
    """A head tied to the embeddings reads their matrix through a Transpose node, which the quantizer does not see
    through: give the MatMul a transposed copy of its own (the embeddings' lookup keeps the original)."""
    from onnx import numpy_helper

    graph = model.graph
    weights = {tensor.name: tensor for tensor in graph.initializer}
    readers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    for node in list(graph.node):
        if node.op_type != "Transpose" or node.input[0] not in weights:
            continue
        users = readers.get(node.output[0], [])
        if not users or any(user.op_type != "MatMul" or user.input[1] != node.output[0] for user in users):
            continue
        folded = numpy_helper.from_array(np.ascontiguousarray(numpy_helper.to_array(weights[node.input[0]]).T),
                                         name=node.output[0])
        graph.initializer.append(folded)
        graph.node.remove(node)


def _split_weight_gemms(model: Any) -> None:
    """A Gemm on a weight (GPT-2's Conv1D layers export so) becomes MatMul + Add, which the quantizer handles; the
    product it computes is the same (alpha = beta = 1, the input not transposed: what the exporter writes)."""
    from onnx import helper, numpy_helper

    graph = model.graph
    weights = {tensor.name: tensor for tensor in graph.initializer}
    replaced = set()
    for index, node in reversed(list(enumerate(graph.node))):
        options = {attribute.name: helper.get_attribute_value(attribute) for attribute in node.attribute}
        if (node.op_type != "Gemm" or node.input[1] not in weights or options.get("transA", 0)
                or options.get("alpha", 1.0) != 1.0 or options.get("beta", 1.0) != 1.0):
            continue
        weight = numpy_helper.to_array(weights[node.input[1]])
        weight = weight.T if options.get("transB", 0) else weight
        graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(weight), name=f"{node.name}.weight"))
        has_bias = len(node.input) > 2 and node.input[2]
        product = f"{node.output[0]}.product" if has_bias else node.output[0]
        replacement = [helper.make_node("MatMul", [node.input[0], f"{node.name}.weight"], [product],
                                        name=f"{node.name}.matmul")]
        if has_bias:
            replacement.append(helper.make_node("Add", [product, node.input[2]], [node.output[0]],
                                                name=f"{node.name}.bias"))
        graph.node.remove(node)
        for offset, new_node in enumerate(replacement):
            graph.node.insert(index + offset, new_node)
        replaced.add(node.input[1])
    read = {name for node in graph.node for name in node.input}
    for name in replaced - read:  # the original layout, now read by nothing: not saved twice
        graph.initializer.remove(weights[name])


def _example_prompts(model: Any) -> dict[str, Any]:
    """generate's inputs for the capture: random token ids (the graph does not depend on their values)."""
    import torch

    width = max(EXAMPLE_LENGTHS)
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, model.config.get_text_config().vocab_size, (len(EXAMPLE_LENGTHS), width),
                              generator=generator)
    attention_mask = torch.tensor([[0] * (width - n) + [1] * n for n in EXAMPLE_LENGTHS])
    return {"input_ids": input_ids, "attention_mask": attention_mask}


class OnnxCausalLM:
    """An exported causal LM answering the calls a transformers model gets from finesweep's evaluation (input_ids,
    attention_mask in; `.logits` of every position out), generation and timing (`generate`, greedy)."""

    def __init__(self, folder: Path, threads: int | None = None) -> None:
        import torch
        from transformers import AutoConfig, GenerationConfig

        folder = Path(folder)
        self.session = cpu_session(folder, threads)
        self.input_names = {entry.name for entry in self.session.get_inputs()}
        self.cache_inputs, cache_outputs = cache_tensors(self.session)
        self.outputs = ["logits"] + cache_outputs
        self.config = AutoConfig.from_pretrained(folder)
        self.generation_config = (GenerationConfig.from_pretrained(folder)
                                  if (folder / "generation_config.json").is_file()
                                  else GenerationConfig.from_model_config(self.config))
        self.device = torch.device("cpu")

    def eval(self) -> "OnnxCausalLM":
        return self

    def __call__(self, input_ids: Any, attention_mask: Any = None, **_: Any) -> SimpleNamespace:
        """The logits of every position of the rows, from an empty cache (labels are the caller's to score)."""
        import torch

        ids = input_ids.cpu().numpy()
        mask = np.ones_like(ids) if attention_mask is None else attention_mask.cpu().numpy()
        logits, _ = self._step(ids, mask, positions_of(mask), self._empty_cache(len(ids)))
        return SimpleNamespace(logits=torch.from_numpy(logits), loss=None)

    def generate(self, input_ids: Any, attention_mask: Any = None, max_new_tokens: int = 20, min_new_tokens: int = 0,
                 eos_token_id: int | Sequence[int] | None = None, pad_token_id: int | None = None,
                 **_: Any) -> Any:
        """Greedy decoding as transformers' `generate(do_sample=False, num_beams=1)` does it: prompts padded on
        the left, end-of-sequence held off for `min_new_tokens`, a finished row padded until every row has finished
        or `max_new_tokens` were written. Returns the prompts followed by the new tokens."""
        import torch

        eos = token_ids(eos_token_id if eos_token_id is not None else self.generation_config.eos_token_id)
        pad = pad_token_id if pad_token_id is not None else (eos[0] if eos else 0)
        ids = input_ids.cpu().numpy()
        mask = np.ones_like(ids) if attention_mask is None else attention_mask.cpu().numpy()
        positions = positions_of(mask)
        logits, cache = self._step(ids, mask, positions, self._empty_cache(len(ids)))
        finished = np.zeros(len(ids), dtype=bool)
        written: list[np.ndarray] = []
        for step in range(max_new_tokens):
            scores = logits[:, -1, :]
            if step < min_new_tokens and eos:
                scores = scores.copy()
                scores[:, eos] = -np.inf
            token = np.where(finished, pad, scores.argmax(axis=-1))
            written.append(token)
            finished |= np.isin(token, eos)
            if finished.all() or step == max_new_tokens - 1:
                break
            mask = np.concatenate([mask, np.ones((len(ids), 1), dtype=mask.dtype)], axis=1)
            positions = positions[:, -1:] + 1
            logits, cache = self._step(token[:, None], mask, positions, cache)
        new = np.stack(written, axis=1) if written else np.zeros((len(ids), 0), dtype=ids.dtype)
        return torch.from_numpy(np.concatenate([ids, new.astype(ids.dtype)], axis=1))

    def _step(self, ids: np.ndarray, mask: np.ndarray, positions: np.ndarray,
              cache: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        feed = {"input_ids": ids.astype(np.int64), "position_ids": positions.astype(np.int64),
                **{entry.name: tensor for entry, tensor in zip(self.cache_inputs, cache)}}
        if "attention_mask" in self.input_names:
            feed["attention_mask"] = mask.astype(np.int64)
        logits, *cache = self.session.run(self.outputs, feed)
        return logits, cache

    def _empty_cache(self, batch: int) -> list[np.ndarray]:
        """A cache holding no position yet, for each layer's keys and values: [batch, heads, 0, head size] (ONNX
        Runtime gives some static dimensions as text)."""
        return [np.zeros((batch, int(entry.shape[1]), 0, int(entry.shape[3])), dtype=CACHE_DTYPES[entry.type])
                for entry in self.cache_inputs]


def cache_tensors(session: Any) -> tuple[list[Any], list[str]]:
    """The graph's cache inputs (ONNX Runtime's input entries, in the graph's order) and, for each, the name of the
    output that feeds it at the next step: the output whose name ends like the input's after its container
    (`layers.<i>.keys`). A graph without logits or whose cache outputs do not answer its cache inputs one to one was
    not made by this exporter: a ValueError names what was found."""
    inputs = [entry for entry in session.get_inputs() if entry.name not in TOKEN_INPUTS]
    outputs = {_cache_slot(entry.name): entry.name for entry in session.get_outputs() if entry.name != "logits"}
    slots = [_cache_slot(entry.name) for entry in inputs]
    if sorted(slots) != sorted(outputs) or "logits" not in {entry.name for entry in session.get_outputs()}:
        found = [entry.name for entry in session.get_outputs()]
        raise ValueError(f"the ONNX graph's cache inputs {[entry.name for entry in inputs]} do not match its outputs "
                         f"{found} one to one (expected logits and one output per cache input): export the model "
                         "again with this version of finesweep")
    return inputs, [outputs[slot] for slot in slots]


def _cache_slot(name: str) -> str:
    """`input.cache.layers.0.keys` and `output.past_key_values.layers.0.keys` -> `layers.0.keys`."""
    return name.split(".", 2)[-1]


def positions_of(mask: np.ndarray) -> np.ndarray:
    """Each token's position within its row, counting real tokens only (left padding takes position 0), as
    transformers' generate computes it."""
    return np.maximum(np.cumsum(mask, axis=1) - 1, 0)


def token_ids(value: int | Sequence[int] | None) -> list[int]:
    if value is None:
        return []
    return [int(value)] if isinstance(value, (int, np.integer)) else [int(token) for token in value]
