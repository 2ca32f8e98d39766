"""Checkpoints: our model directory, Hugging Face, Google TF1, safetensors, and the name mapping between them."""
