"""Heads over the encoder: pre-training, classifier, tagger, QA, multiple choice, and their shared base."""
