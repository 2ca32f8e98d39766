"""BERT on Keras 3: the encoder, its heads, and checkpoint conversion.

    import model
    encoder_or_task_model = model.load("path/to/checkpoint")   # google, hf, keras or keras-hub

`import model` stays cheap (no TensorFlow): `load` imports what it needs.
"""


def load(path: str, task: str | None = None, allow_new_heads: bool = False, **options):
    """The project's Keras model for a checkpoint in any supported format.

    Recognises our model directory (config.json with "encoder" +
    model.weights.h5), a `.keras` file, a Hugging Face folder (config.json +
    model.safetensors; pytorch_model.bin is refused), a keras-hub preset folder
    (its config.json a keras-hub backbone's) and a Google TF1 folder
    (bert_config.json + *.ckpt.index). Errors name the tensor or file at
    fault; heads created fresh (only with `allow_new_heads=True`) are reported
    with a warning.

    Args:
        path: folder, `.keras` file or Google checkpoint prefix.
        task: see `model.checkpoints.formats.TASKS`; None keeps the checkpoint's own.
        allow_new_heads: create heads absent from the checkpoint fresh.
        **options: `num_labels`, `num_choices` for task heads.

    A training run's checkpoint (RUN/checkpoints/ckpt-NNNNNNNN, what `finetune --init`
    takes) loads as the run's model at that step, or its encoder with `task="encoder"`.
    """
    import warnings

    from model.checkpoints.formats import read
    from model.io.native_logs import ProjectWarning
    from model.training.layout import checkpoint_of

    if checkpoint_of(path) is not None:
        if allow_new_heads or options:
            raise ValueError(
                f"{path}: a training checkpoint takes no new head nor its options "
                f"({sorted(options) or 'allow_new_heads'}): load it, or fine-tune from it"
            )
        return _training_checkpoint(path, task)
    model, _, notes = read(path, task=task, allow_new_heads=allow_new_heads, **options)
    for note in notes:
        warnings.warn(f"{path}: {note}", ProjectWarning, stacklevel=2)
    return model


def _training_checkpoint(path: str, task: str | None):
    """The model of a training run at one checkpoint (`load`'s), or its encoder."""
    from model.checkpoints.model_dir import encoder_of
    from model.training.checkpointing import load_checkpoint

    if task not in (None, "encoder"):
        raise ValueError(
            f"{path}: a training checkpoint loads as its run's model (task None) or its "
            f"encoder (task='encoder'); a {task} head starts from it with "
            f"python -m model.train finetune --init {path}"
        )
    model, _, _ = load_checkpoint(path)
    return encoder_of(model) if task == "encoder" else model
