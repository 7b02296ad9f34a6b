"""The export's serving package: what runs a model once training is over. Quantizing a saved model (bitsandbytes,
torchao, ONNX Runtime's int8 graph for a classifier or a decoder), loading any exported folder whatever runs it
(loader.py: every caller loads through it), scoring it on the test split and timing it (evaluate.py, generate.py),
and answering a user's texts (predict.py). Training (trial.py, probe_step.py, models.py, data/) imports nothing
from here."""
