"""Everything that touches a model: data, loading, one trial, one probe step, evaluation, quantization."""
