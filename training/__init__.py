"""The training pipeline: data, tokenizers, the paper's recipe, fit, evaluation."""
