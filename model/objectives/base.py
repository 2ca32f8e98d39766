"""What every pre-training objective provides to `python -m model.train pretrain`.

An objective is one unit with three parts, read top to bottom in its file:

1. `batches`: its work in the input pipeline, a batch transform (numpy; the
   interface of `model.pretraining.masking.MaskedLMBatches`), run by the
   tf.data pipeline and the JAX PyDataset alike, on records of one of its
   `inputs` formats (`python -m model.data --inputs`);
2. `build_model(encoder, seed)`: the heads it puts on the encoder, a Keras
   model whose outputs are named like the transform's labels (`seed`, the
   run's, for an objective that draws inside the graph: ELECTRA's sampling);
3. `losses()`, `loss_weights()` and `metrics()`: per output, the mean over
   the global batch (the pipeline scales the weights).

`encoder_config` lets an objective change the encoder itself (the
left-to-right LM makes its attention causal, and the config records it).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class ObjectiveOptions:
    """The masking flags of `python -m model.train pretrain`, for the objectives that mask.

    Args:
        seq_len: the records' sequence length.
        mask_rate, mask_token_rate, random_token_rate: the share of tokens to
            predict and, of those, the shares replaced by [MASK] and by a
            random token; None: the objective's own (BERT's 0.8 and 0.1,
            ELECTRA's 0.85 and 0.0).
        max_predictions: predictions per sequence; None: the objective's
            default for `seq_len`.
        whole_word: BERT's whole-word masking.
        next_sentence: BERT's next-sentence prediction (`--no-nsp` turns it off).
        generator_size, discriminator_weight: ELECTRA's generator width (a share
            of the discriminator's) and the weight λ of its discriminator loss.
    """

    seq_len: int
    mask_rate: float = 0.15
    mask_token_rate: float | None = None
    random_token_rate: float | None = None
    max_predictions: int | None = None
    whole_word: bool = False
    next_sentence: bool = True
    generator_size: float = 0.25
    discriminator_weight: float = 50.0


class Objective:
    """Base class. Subclasses set the class attributes and implement the methods.

    Attributes:
        name: the `--objective` value.
        inputs: the record formats (dataset.json "input_format") it trains on.
        static_masks: whether records masked at creation (`--masking static`)
            can be used as they are.
    """

    name: str = ""
    inputs: tuple[str, ...] = ()
    static_masks: bool = False
    # Of the chosen tokens, the shares made [MASK] and a random token, unless flags say otherwise.
    mask_token_rate: float = 0.8
    random_token_rate: float = 0.1

    def __init__(self, vocabulary: list[str], options: ObjectiveOptions):
        self.vocabulary = vocabulary
        self.options = options
        self.next_sentence = False

    # === The input pipeline ===
    @property
    def batches(self):
        """The batch transform the input pipeline runs."""
        raise NotImplementedError

    def device_batches(self, tables):
        """The same batch made on the device, inside the compiled step
        (model/pretraining/device_data.py): a function `(key, token_ids, padding_mask,
        rates)` -> {"x", "y", "sw"}; `tables` the vocabulary's `VocabularyTables`."""
        raise ValueError(
            f"--objective {self.name} has no device-side batches: train it without "
            f"--device-data (the host pipeline)"
        )

    def masking_rates(self) -> dict:
        """The runtime masking rates of the device path (`device_masking.masking_rates`)."""
        from model.pretraining.device_masking import masking_rates

        return masking_rates(self.options.mask_rate, *self.replacement_rates())

    def check_records(self, pattern: str, info: dict) -> None:
        """Refuses records this objective cannot train on, naming the flag that makes the right ones."""
        inputs = records_inputs(info)
        if inputs not in self.inputs:
            raise ValueError(
                f"{pattern}: records of {inputs} inputs; --objective {self.name} trains on "
                f"{' or '.join(self.inputs)} (python -m model.data --inputs {self.inputs[0]})"
            )
        if info.get("masking") == "static" and not self.static_masks:
            raise ValueError(
                f"{pattern}: records masked at creation (--masking static); --objective "
                f"{self.name} masks in the input pipeline: make them with --masking dynamic"
            )

    def replacement_rates(self) -> tuple[float, float]:
        """(mask_token_rate, random_token_rate): the flags', else this objective's."""
        o = self.options
        return (
            self.mask_token_rate if o.mask_token_rate is None else o.mask_token_rate,
            self.random_token_rate if o.random_token_rate is None else o.random_token_rate,
        )

    def masker(self):
        """BERT's token masking with this objective's rates and the flags
        (`model.pretraining.masking.Masker`), `max_predictions()` slots."""
        from model.pretraining.masking import Masker, MaskingConfig

        o = self.options
        mask_token_rate, random_token_rate = self.replacement_rates()
        config = MaskingConfig(
            mask_rate=o.mask_rate,
            mask_token_rate=mask_token_rate,
            random_token_rate=random_token_rate,
            max_predictions=self.max_predictions(),
            whole_word=o.whole_word,
        )
        return Masker(self.vocabulary, config)

    # === The model ===
    def encoder_config(self, config):
        """The encoder's `BertConfig` for this objective (most keep it as it is)."""
        return config

    def build_model(self, encoder, seed=None):
        raise NotImplementedError

    # === The loss ===
    def losses(self) -> dict:
        import keras

        return {
            name: keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            for name in self.outputs()
        }

    def loss_weights(self) -> dict | None:
        """Per output, its weight in the total loss (None: all 1)."""
        return None

    def metrics(self) -> dict:
        import keras

        return {
            name: [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
            for name in self.outputs()
        }

    def outputs(self) -> tuple[str, ...]:
        """The model's output names (each with a label in the batch)."""
        raise NotImplementedError

    def max_predictions(self, room: float = 0.0) -> int:
        """`--max-predictions`, else the slots `--mask-rate` needs (`prediction_slots`)."""
        from model.pretraining.masking import prediction_slots

        options = self.options
        return options.max_predictions or prediction_slots(options.mask_rate, options.seq_len, room)


def records_inputs(info: dict) -> str:
    """The inputs format of records (dataset.json); records made before the
    `--inputs` flag are sentence pairs, or segments when made with --no-nsp."""
    if "input_format" in info:
        return info["input_format"]
    return "sentence-pairs" if info.get("next_sentence", True) else "segments"
