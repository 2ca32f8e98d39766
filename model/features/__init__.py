"""Feature-based mode (paper section 5.3): frozen layers per token, and a BiLSTM tagger on them."""
