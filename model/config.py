"""`BertConfig`: the one description of a BERT encoder's shape.

Every other part of the project (the encoder, the heads, checkpoint conversion,
export) reads its sizes from here. A config is written next to the weights as
`config.json`, so a model directory is self-describing:

    python -c "from model.config import BertConfig; print(BertConfig.preset('base'))"
"""

from __future__ import annotations

import dataclasses
import math

# Activation names. Hugging Face's `"gelu"` is the exact erf form; Google's
# original `modeling.py` called its tanh approximation `"gelu"` too, which is
# why the name alone is ambiguous and we spell out both.
GELU = "gelu"
GELU_APPROXIMATE = "gelu_approximate"
ACTIVATIONS = (GELU, GELU_APPROXIMATE, "relu")
# transformers' names of the tanh approximation (Google's "gelu" is one too)
TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The shape of a BERT encoder and the casing of its vocabulary.

    Args:
        vocabulary_size: WordPiece vocabulary size; bert-base-uncased has 30,522.
        num_layers: Transformer blocks (L in the paper).
        num_heads: attention heads per block (A); must divide `hidden_dim`.
        hidden_dim: width of every hidden state (H).
        intermediate_dim: width of the feed-forward layer, 4H in the paper.
        dropout: dropout on embeddings, attention probabilities and block
            outputs; the paper uses 0.1 everywhere.
        max_sequence_length: number of learned position embeddings.
        num_segments: segment (token type) embeddings; 2 for sentence A/B.
        activation: `"gelu"` (exact erf, what Hugging Face checkpoints mean) or
            `"gelu_approximate"` (tanh, what Google's TF1 checkpoints were
            trained with). Mixing them up moves hidden states by about 3e-3.
        layer_norm_epsilon: 1e-12 in every released BERT.
        initializer_range: stddev of the truncated-normal initializer.
        lowercase: the vocabulary is uncased (lower-case and strip accents
            before WordPiece). Part of the model: the wrong casing silently
            turns most words into `[UNK]`.
        causal: every position attends only to itself and earlier positions
            (the paper's "LTR & No NSP" baseline, section 5.1), and the pooled
            output reads the last real token instead of `[CLS]`. Part of the
            model, not of one run: the paper kept the left-only constraint at
            fine-tuning too, so every head, evaluation and export built from
            this config keeps it.
        embedding_dim: width of the token, position and segment embeddings
            when it differs from `hidden_dim` (ELECTRA's factorised
            embedding: 128 for a hidden width of 256); a dense layer projects
            the embeddings' output to `hidden_dim` before the first block.
            None: `hidden_dim`, no projection (BERT).

    Example:
    >>> BertConfig.preset("tiny").hidden_dim
    32
    """

    vocabulary_size: int = 30522
    num_layers: int = 12
    num_heads: int = 12
    hidden_dim: int = 768
    intermediate_dim: int = 3072
    dropout: float = 0.1
    max_sequence_length: int = 512
    num_segments: int = 2
    activation: str = GELU
    layer_norm_epsilon: float = 1e-12
    initializer_range: float = 0.02
    lowercase: bool = True
    # False: the bidirectional BERT. A config.json written before this field
    # existed has no "causal" key and so loads as the model it was.
    causal: bool = False
    # None: the embeddings are hidden_dim wide (every BERT; old config.json files).
    embedding_dim: int | None = None

    @property
    def embedding_size(self) -> int:
        """The embeddings' width: `embedding_dim`, else `hidden_dim`."""
        return self.embedding_dim or self.hidden_dim

    def __post_init__(self):
        for name in (
            "vocabulary_size",
            "num_layers",
            "num_heads",
            "hidden_dim",
            "intermediate_dim",
            "max_sequence_length",
            "num_segments",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"BertConfig.{name} must be a positive integer, got {value!r}")
        if self.hidden_dim % self.num_heads:
            raise ValueError(
                f"BertConfig.hidden_dim ({self.hidden_dim}) must be divisible by "
                f"num_heads ({self.num_heads})"
            )
        if not is_number(self.dropout) or not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"BertConfig.dropout must be in [0, 1), got {self.dropout!r}")
        # A zero or negative epsilon divides by zero on a constant row; a
        # negative stddev fails only later, deep inside an initializer.
        for name in ("layer_norm_epsilon", "initializer_range"):
            value = getattr(self, name)
            if not is_number(value) or not value > 0:
                raise ValueError(f"BertConfig.{name} must be a positive number, got {value!r}")
        if self.embedding_dim is not None and (
            not isinstance(self.embedding_dim, int)
            or isinstance(self.embedding_dim, bool)
            or self.embedding_dim < 1
        ):
            raise ValueError(
                f"BertConfig.embedding_dim must be a positive integer or null, "
                f"got {self.embedding_dim!r}"
            )
        if not isinstance(self.causal, bool):
            raise ValueError(f"BertConfig.causal must be true or false, got {self.causal!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"BertConfig.activation must be one of {ACTIVATIONS}, got {self.activation!r}"
            )

    # === Presets ===

    @classmethod
    def preset(cls, name: str, **overrides) -> BertConfig:
        """A named size from the paper (or `tiny`, for tests); `overrides` win."""
        if name not in PRESETS:
            raise ValueError(f"Unknown preset {name!r}; choose from {sorted(PRESETS)}")
        return dataclasses.replace(PRESETS[name], **overrides)

    def replace(self, **changes) -> BertConfig:
        return dataclasses.replace(self, **changes)

    # === JSON ===

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(
        cls, data: dict, source: str = "config", hugging_face: bool | None = None
    ) -> BertConfig:
        """Reads our own keys, or Google's / Hugging Face's `bert_config.json` keys.
        `hugging_face`: the caller knows whose keys they are (None: guessed from them)."""
        if "hidden_size" in data:
            return cls._from_reference_dict(data, source, hugging_face)
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise ValueError(f"{source}: unknown BertConfig keys {unknown}")
        try:
            return cls(**data)
        except (TypeError, ValueError) as e:  # a key missing, a value out of range
            raise ValueError(f"{source}: {e}") from None

    @classmethod
    def _from_reference_dict(cls, data: dict, source: str, hugging_face: bool | None) -> BertConfig:
        # Hugging Face configs name their model type (all but the oldest, whose reader says
        # so); Google's never do. Only then can "gelu" be read: Google's modeling.py meant
        # the tanh form.
        is_hf = hugging_face
        if is_hf is None:
            is_hf = "model_type" in data or "architectures" in data
        act = data.get("hidden_act", "gelu")
        if act in TANH_GELUS or (act == "gelu" and not is_hf):
            act = GELU_APPROXIMATE
        elif act == "gelu_python":  # transformers' erf GELU written in Python
            act = GELU
        if act not in ACTIVATIONS:
            raise ValueError(
                f"{source}: hidden_act {act!r}: this project builds gelu (exact), "
                f"{', '.join(TANH_GELUS)} (the tanh form) and relu"
            )
        position = data.get("position_embedding_type", "absolute")
        if position != "absolute":
            raise ValueError(
                f"{source}: position_embedding_type {position!r}: this project builds "
                f"BERT's absolute position embeddings only"
            )
        try:
            return cls(
                vocabulary_size=data["vocab_size"],
                num_layers=data["num_hidden_layers"],
                num_heads=data["num_attention_heads"],
                hidden_dim=data["hidden_size"],
                intermediate_dim=data["intermediate_size"],
                dropout=data.get("hidden_dropout_prob", 0.1),
                max_sequence_length=data.get("max_position_embeddings", 512),
                num_segments=data.get("type_vocab_size", 2),
                activation=act,
                layer_norm_epsilon=data.get("layer_norm_eps", 1e-12),
                initializer_range=data.get("initializer_range", 0.02),
                lowercase=data.get("do_lower_case", True),
                # Hugging Face's BertModel masks attention causally when
                # `is_decoder` is set (BertLMHeadModel); Google's never does.
                causal=bool(data.get("is_decoder", False)),
            )
        except KeyError as e:
            raise ValueError(f"{source}: missing key {e.args[0]!r} for a BERT config") from None
        except (TypeError, ValueError) as e:  # a value out of range, in our field's name
            raise ValueError(f"{source}: {e}") from None

    def to_google_dict(self) -> dict:
        """Google's `bert_config.json` form (its "gelu" is the tanh approximation)."""
        if self.activation == GELU:
            # Google's modeling.py has no exact GELU; say so instead of lying.
            raise ValueError(
                "Google's bert_config.json cannot express the exact (erf) GELU; "
                "its 'gelu' is the tanh approximation"
            )
        if self.causal:
            # modeling.py has no causal mask: its model would silently read
            # both directions with weights trained to read one.
            raise ValueError(
                "Google's bert_config.json cannot express a causal (left-to-right) "
                "encoder; its modeling.py always attends in both directions"
            )
        if self.embedding_size != self.hidden_dim:
            raise ValueError(
                f"Google's bert_config.json cannot express embeddings {self.embedding_size} "
                f"wide under a hidden width of {self.hidden_dim} (an ELECTRA-style "
                f"factorised embedding); BERT's modeling.py has no projection"
            )
        return {
            "attention_probs_dropout_prob": self.dropout,
            "hidden_act": "gelu" if self.activation == GELU_APPROXIMATE else self.activation,
            "hidden_dropout_prob": self.dropout,
            "hidden_size": self.hidden_dim,
            "initializer_range": self.initializer_range,
            "intermediate_size": self.intermediate_dim,
            "max_position_embeddings": self.max_sequence_length,
            "num_attention_heads": self.num_heads,
            "num_hidden_layers": self.num_layers,
            "type_vocab_size": self.num_segments,
            "vocab_size": self.vocabulary_size,
        }

    @classmethod
    def from_json(cls, path: str) -> BertConfig:
        from model.io.files import read_json_object

        data = read_json_object(path)
        # Our model directories keep the encoder config under "encoder".
        data = data.get("encoder", data)
        return cls.from_dict(data, source=path)

    def to_json(self, path: str) -> None:
        from model.io.files import write_json

        write_json(path, self.to_dict())


def stored(encoder: dict, name: str):
    """Field `name` of a stored encoder config (a config.json's "encoder" section), or
    BertConfig's default where the file leaves it out (an older or hand-written one)."""
    return encoder.get(name, getattr(BertConfig, name))


def is_number(value) -> bool:
    """A finite int or float (JSON's Infinity and NaN are not sizes or rates)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


PRESETS = {
    # Small enough that a test builds, trains and saves it in about a second.
    "tiny": BertConfig(
        vocabulary_size=1000,
        num_layers=2,
        num_heads=2,
        hidden_dim=32,
        intermediate_dim=64,
        max_sequence_length=128,
    ),
    # The sizes of Google's 24 smaller BERTs (Turc et al., 2019) and the paper.
    "mini": BertConfig(num_layers=4, num_heads=4, hidden_dim=256, intermediate_dim=1024),
    "small": BertConfig(num_layers=4, num_heads=8, hidden_dim=512, intermediate_dim=2048),
    "medium": BertConfig(num_layers=8, num_heads=8, hidden_dim=512, intermediate_dim=2048),
    "base": BertConfig(num_layers=12, num_heads=12, hidden_dim=768, intermediate_dim=3072),
    "large": BertConfig(num_layers=24, num_heads=16, hidden_dim=1024, intermediate_dim=4096),
    # sentence-transformers/all-MiniLM-L6-v2: a BERT with 6 layers of width 384.
    "minilm-l6": BertConfig(num_layers=6, num_heads=12, hidden_dim=384, intermediate_dim=1536),
    # ELECTRA-Small (Clark et al. 2020, Table 6): 128-wide embeddings projected to 256.
    "electra-small": BertConfig(
        num_layers=12, num_heads=4, hidden_dim=256, intermediate_dim=1024, embedding_dim=128
    ),
    # For a CPU: `mini`'s depth with ELECTRA-Small's width and factorised embedding.
    "electra-mini": BertConfig(
        num_layers=4, num_heads=4, hidden_dim=256, intermediate_dim=1024, embedding_dim=128
    ),
}
