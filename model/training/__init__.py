"""Training: the fine-tuning loop, the optimizer, distribution strategies, resumable checkpoints."""
