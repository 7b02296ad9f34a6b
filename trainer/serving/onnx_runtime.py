"""A classifier exported for ONNX Runtime with dynamic int8 quantization: the CPU deployment path that serves faster
than the PyTorch model (int8 weights, activations quantized per call, ONNX Runtime's integer matrix kernels).

The graph comes from torch's own ONNX exporter (`torch.onnx.export(..., dynamo=True)`, batch and sequence length
left dynamic); the quantization is ONNX Runtime's `quantize_dynamic`. The folder holds `model.onnx` (a protobuf: no
pickle), config.json (labels) and the tokenizer, so a user needs onnxruntime and a tokenizer, not torch.
`OnnxClassifier` puts an InferenceSession behind the call a transformers model answers, so the export measures it
with the same code as every other variant.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Iterator

from finesweep.spaces import Task
from finesweep.trainer.models import (
    HEAD_MODULES, auto_config, copy_config_without_code, copy_tokenizer, load_checkpoint, text_pair_columns,
)

if TYPE_CHECKING:
    import onnxruntime

log = logging.getLogger(__name__)

ONNX_FILE = "model.onnx"
INPUTS = ("input_ids", "attention_mask")
SEGMENT_IDS = "token_type_ids"  # a classifier of text pairs on a model with segments (BERT) reads them too
# The example batch the exporter traces: two rows of eight tokens, so neither dimension is specialised to 1.
EXAMPLE_SHAPE = (2, 8)
# The exporter lists, once per process, the torchvision operators it skips when torchvision is not installed (a
# warning of a logger under torch.onnx, which the quieted level reaches).
EXPORTER_LOGGER = "torch.onnx"


def is_onnx_folder(folder: Path) -> bool:
    return (Path(folder) / ONNX_FILE).is_file()


def export_int8(full_dir: Path, out_dir: Path) -> Path:
    """The full-precision classifier in `full_dir` exported to ONNX, quantized to dynamic int8, saved with its config
    and tokenizer in `out_dir`; returns `out_dir`. (A causal LM's export is trainer/serving/onnx_decoder.py's.)"""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    full_dir, out_dir = Path(full_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="finesweep-onnx-") as scratch:
        graph = Path(scratch) / ONNX_FILE
        _export_graph(full_dir, graph)
        # The quantizer advises its pre-processing on the root logger at every call; that pre-processing (symbolic
        # shape inference) stops on the graphs torch's exporter writes, so the advice is noise here.
        with quiet(None):
            quantize_dynamic(graph, out_dir / ONNX_FILE, weight_type=QuantType.QInt8,
                             nodes_to_exclude=_head_nodes(graph))
    copy_config_without_code(full_dir, out_dir)  # labels, architecture: what the folder is
    copy_tokenizer(full_dir, out_dir)
    log.info("%s: saved onnx-int8 to %s", full_dir.name, out_dir)
    return out_dir


def _export_graph(full_dir: Path, path: Path) -> None:
    """torch's exporter on the full model (float32, CPU, eval mode), batch and sequence length dynamic."""
    import torch

    model = load_checkpoint(str(full_dir), Task.classification, dtype=torch.float32).eval()
    # A decoder's classifier (Llama, GPT-2) also returns its key/value cache where its config keeps use_cache (a LoRA
    # winner merged into its base does): the exporter cannot trace that, and a classifier serves the logits alone.
    model.config.use_cache = False
    inputs = graph_inputs(full_dir, model.config)
    example = {"input_ids": torch.randint(0, model.config.vocab_size, EXAMPLE_SHAPE),
               "attention_mask": torch.ones(EXAMPLE_SHAPE, dtype=torch.long)}
    if SEGMENT_IDS in inputs:
        half = EXAMPLE_SHAPE[1] // 2  # two segments, as a pair has
        example[SEGMENT_IDS] = torch.tensor([[0] * half + [1] * (EXAMPLE_SHAPE[1] - half)] * EXAMPLE_SHAPE[0])
    batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
    with warnings.catch_warnings(), quiet(EXPORTER_LOGGER):
        # The inputs share the two dimensions on purpose; the exporter says so once per axis.
        warnings.filterwarnings("ignore", message=".*will not be used, since it shares the same shape constraints")
        program = torch.onnx.export(model, (), kwargs=example, dynamo=True, input_names=list(inputs),
                                    output_names=["logits"], verbose=False,
                                    dynamic_shapes={name: {0: batch, 1: sequence} for name in inputs})
    program.save(str(path))
    _drop_shape_annotations(path)


def graph_inputs(full_dir: Path, model_config: Any) -> tuple[str, ...]:
    """The graph's inputs: the token ids and their mask, and for a classifier of text pairs the segment ids where
    its tokenizer makes them (the model learned which text a token is from; a one-text classifier's are all 0)."""
    from transformers import AutoTokenizer

    if text_pair_columns(model_config) is None:
        return INPUTS
    segments = SEGMENT_IDS in AutoTokenizer.from_pretrained(full_dir).model_input_names
    return INPUTS + ((SEGMENT_IDS,) if segments else ())


def _drop_shape_annotations(graph: Path) -> None:
    """The exporter's intermediate shape annotations (value_info) out of the graph file; nothing reads them but the
    quantizer, which infers its own. onnxruntime before 1.32 turns the head's Gemm into a MatMul over the transposed
    weight and then checks the old annotation against it: shape inference stops (measured with 1.30 and 1.31, the
    onnxruntime of a CUDA image)."""
    import onnx

    model = onnx.load(str(graph), load_external_data=False)  # a large model's weights stay in their own files
    del model.graph.value_info[:]
    onnx.save(model, str(graph))


@contextlib.contextmanager
def quiet(logger_name: str | None) -> Iterator[None]:
    """Only errors from that logger for the duration (None: the root logger)."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _head_nodes(graph: Path) -> list[str]:
    """The graph's nodes that read the classification head's weights: they stay in float32, as in every other
    quantized variant (the head is tiny, and its rounding moves every prediction)."""
    import onnx

    prefixes = tuple(f"{name}." for name in HEAD_MODULES)
    nodes = onnx.load(str(graph), load_external_data=False).graph.node
    heads = [node.name for node in nodes if any(name.startswith(prefixes) for name in node.input)]
    # The quantizer splits a Gemm into <name>_MatMul and <name>_Add before it quantizes: exclude both spellings.
    return heads + [f"{name}_MatMul" for name in heads]


def cpu_session(folder: Path, threads: int | None = None) -> "onnxruntime.InferenceSession":
    """An ONNX Runtime session on the folder's graph, on the CPU, with as many threads as torch uses in this process
    (so the variants are timed on equal terms; ONNX Runtime would take every core of the machine)."""
    import onnxruntime
    import torch

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads or torch.get_num_threads()
    return onnxruntime.InferenceSession(str(Path(folder) / ONNX_FILE), options, providers=["CPUExecutionProvider"])


class OnnxClassifier:
    """An exported ONNX classifier answering the call the evaluation and `predict` make on a transformers model:
    input_ids, attention_mask (and labels) as torch tensors in, an output with `.logits` (and `.loss`) out."""

    def __init__(self, folder: Path, threads: int | None = None) -> None:
        import torch

        self.session = cpu_session(folder, threads)
        self.input_names = [entry.name for entry in self.session.get_inputs()]
        self.config = auto_config(folder)
        self.device = torch.device("cpu")

    def eval(self) -> "OnnxClassifier":
        return self

    def __call__(self, input_ids: Any, attention_mask: Any = None, labels: Any = None, token_type_ids: Any = None,
                 **_: Any) -> SimpleNamespace:
        import torch

        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        given = {"input_ids": input_ids, "attention_mask": attention_mask, SEGMENT_IDS: token_type_ids}
        feed = {name: given[name].cpu().numpy() for name in self.input_names}
        logits = torch.from_numpy(self.session.run(["logits"], feed)[0])
        loss = None if labels is None else torch.nn.functional.cross_entropy(logits, labels.cpu())
        return SimpleNamespace(logits=logits, loss=loss)

