"""BERT on Keras 3: the encoder, its heads, and checkpoint conversion.

    import model
    encoder_or_task_model = model.load("path/to/checkpoint")   # google, hf or keras

`import model` stays cheap (no TensorFlow): `load` imports what it needs.
"""


def load(path: str, task: str | None = None, allow_new_heads: bool = False, **options):
    """The project's Keras model for a checkpoint in any supported format.

    Recognises our model directory (config.json with "encoder" +
    model.weights.h5), a `.keras` file, a Hugging Face folder (config.json +
    model.safetensors; pytorch_model.bin is refused) and a Google TF1 folder
    (bert_config.json + *.ckpt.index). Errors name the tensor or file at
    fault; heads created fresh (only with `allow_new_heads=True`) are reported
    with a warning.

    Args:
        path: folder, `.keras` file or Google checkpoint prefix.
        task: see `model.checkpoints.formats.TASKS`; None keeps the checkpoint's own.
        allow_new_heads: create heads absent from the checkpoint fresh.
        **options: `num_labels`, `num_choices` for task heads.
    """
    import warnings

    from model.checkpoints.formats import read
    from model.io.native_logs import ProjectWarning

    model, _, notes = read(path, task=task, allow_new_heads=allow_new_heads, **options)
    for note in notes:
        warnings.warn(f"{path}: {note}", ProjectWarning, stacklevel=2)
    return model
