"""Text to WordPiece ids: the TensorFlow tokenizer, the pure-Python WordPiece, vocabulary learning."""


def tokenizer_class():
    """The WordPiece tokenizer for the Keras backend in use: tensorflow-text's under
    TensorFlow, the pure-Python one (the same ids) under JAX, so that nothing on a JAX
    machine imports TensorFlow."""
    import keras

    if keras.backend.backend() == "tensorflow":
        from model.text.tokenizer import WordPieceTokenizer
    else:
        from model.text.wordpiece import WordPieceTokenizer
    return WordPieceTokenizer
