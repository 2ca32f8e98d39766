"""Text to WordPiece ids: the TensorFlow tokenizer, the pure-Python WordPiece, vocabulary learning."""
