"""The real inputs an export is verified and (int8) calibrated on.

Where they come from, in order:

  1. `--data FILE`: for a fine-tuned model (config.json names its
     `finetuned_task`) a file in that task's own format, read and encoded by
     `model.tasks` exactly as evaluation does; for any other model a raw text
     file, one text per line ("A<TAB>B" is a pair).
  2. A fine-tuned model's own dev file: the first of `dev_files` in its
     metrics.json (written by `python -m model.train finetune`).
  3. Encoder and pre-training models (and heads with no known task): the
     `BUILTIN_SENTENCES` below, 32 ordinary English sentences.

A fine-tuned model with neither 1 nor 2 is refused: it must be checked on its
own kind of data. Pre-training inputs get about 15 % of their word pieces
replaced by [MASK] (fixed seed); `mask_weights` marks the real mask positions.

ELECTRA models (`replaced_tokens`) are checked on text corrupted as their
pre-training corrupts it: the positions chosen and masked by the objective's
own batch transform (`model.objectives.electra`: 15 %, of which 85 % [MASK]
and 15 % kept), then the generator's samples written in (a pre-training
run's) or, for a discriminator alone, random vocabulary tokens.

    python -c "from export import examples; print(examples.BUILTIN_SENTENCES[0])"
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from model.tasks.base import trimmed_length

BUILTIN_SENTENCES = (
    "The cat sat quietly on the warm windowsill and watched the rain.",
    "Paris is the capital and most populous city of France.",
    "She bought three apples, a loaf of bread and some cheese at the market.",
    "The meeting has been moved to Thursday afternoon because of the holiday.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "He said the film was far too long, but the music was wonderful.",
    "The river flooded the village after a week of heavy storms.",
    "Our train was delayed by forty minutes, so we missed the opening speech.",
    "Photosynthesis turns sunlight, water and carbon dioxide into sugar and oxygen.",
    "I really did not enjoy the food at that restaurant.",
    "The committee approved the new budget by a narrow margin on Monday.",
    "Mount Everest is the highest mountain above sea level.",
    "The children built a small wooden boat and sailed it on the pond.",
    "This is one of the most moving performances I have seen in years.",
    "The company reported higher profits in the third quarter.",
    "A strong wind blew the leaves across the empty parking lot.",
    "The museum will open a new exhibition of early photographs next month.",
    "Shakespeare wrote Hamlet around the year 1600.",
    "The plot is predictable and the dialogue is painfully flat.",
    "Doctors recommend at least seven hours of sleep every night.",
    "The old bridge was closed for repairs after inspectors found cracks.",
    "Volunteers planted more than two hundred trees along the river bank.",
    "The orchestra played Beethoven's ninth symphony to a full hall.",
    "Could you please send me the report before the end of the day?",
    "The spacecraft entered orbit around Mars after a seven month journey.",
    "Nobody expected the small team to win the national championship.",
    "The library lends books, music and films free of charge.",
    "Heavy traffic slowed the morning commute across the city.",
    "The recipe calls for two eggs, a cup of flour and a pinch of salt.",
    "Scientists discovered a new species of frog in the rainforest.",
    "The actors are charming, but the story never really comes to life.",
    "After the concert, the band signed autographs for their fans.",
)
MASK_RATE = 0.15
SEED = 0


@dataclasses.dataclass
class Inputs:
    """Model inputs padded to the export's sequence length.

    x: {name: (rows, [choices,] seq_len) int32}; pretraining adds
        mask_positions (rows, masks).
    source: where they came from (a path, or "built-in sentences").
    mask_weights: pretraining only: (rows, masks) 1.0 at real mask positions.
    """

    x: dict[str, np.ndarray]
    source: str
    mask_weights: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.x["token_ids"])

    def take(self, rows) -> Inputs:
        rows = np.asarray(rows, dtype=np.int64)
        weights = self.mask_weights[rows] if self.mask_weights is not None else None
        return Inputs({k: v[rows] for k, v in self.x.items()}, self.source, weights)

    def batches(self, batch_size: int):
        """(rows, inputs) in batches of `batch_size` consecutive rows, the token
        axis cut to the batch's longest row: shorter rows keep some padding,
        as in evaluation, so the masked attention is exercised too."""
        for start in range(0, len(self), batch_size):
            rows = np.arange(start, min(start + batch_size, len(self)))
            length = trimmed_length(self.x["padding_mask"][rows], multiple=1)
            yield (
                rows,
                {
                    k: v[rows][..., :length] if k != "mask_positions" else v[rows]
                    for k, v in self.x.items()
                },
            )

    def row(self, i: int) -> dict[str, np.ndarray]:
        """Row `i` alone at exactly its own length (no padding): the runtime's case."""
        length = trimmed_length(self.x["padding_mask"][i : i + 1], multiple=1)
        return {
            k: v[i : i + 1][..., :length] if k != "mask_positions" else v[i : i + 1]
            for k, v in self.x.items()
        }


@dataclasses.dataclass
class ReplacedTokens:
    """Replaced-token detection rows, as ELECTRA's pre-training makes them (`replaced_tokens`).

    masked: the generator's inputs: token_ids with the chosen positions
        masked, mask_positions and mask_weights (as pre-training inputs).
    corrupted: the discriminator's inputs: the replacements written in.
    labels: (rows, seq_len) float32, 1.0 at the real tokens that differ from
        the original text (a replacement equal to the original is not one).
    replacement: "generator samples" or "random vocabulary tokens".
    """

    masked: Inputs
    corrupted: Inputs
    labels: np.ndarray
    replacement: str

    def __len__(self) -> int:
        return len(self.corrupted)

    def take(self, rows) -> ReplacedTokens:
        rows = np.asarray(rows, dtype=np.int64)
        return ReplacedTokens(
            self.masked.take(rows), self.corrupted.take(rows), self.labels[rows], self.replacement
        )


GENERATOR_SAMPLES = "generator samples"
RANDOM_TOKENS = "random vocabulary tokens"


def replaced_tokens(
    tokenizer,
    seq_len: int,
    count: int | None,
    data: str | None = None,
    generator=None,
    seed: int = SEED,
    batch_size: int = 32,
) -> ReplacedTokens:
    """Up to `count` (None: all) rows of `data` (raw text, else the built-in
    sentences) corrupted as ELECTRA's pre-training does (the module docstring).

    generator: `predict(inputs) -> {"mlm": (batch, masks, vocabulary) logits}`
        (the generator's serving function); a token is drawn from the softmax at
        every chosen position, as pre-training draws (never a special one). None:
        random vocabulary tokens (never special ones either) instead.
    Row i draws from `default_rng([seed, i])` alone: the same rows whatever
    `count` and `batch_size`.
    """
    from export.runtime import draw_words, softmax
    from model.objectives import ObjectiveOptions, get

    texts, source = (
        (read_texts(data), data) if data else (list(BUILTIN_SENTENCES), "built-in sentences")
    )
    texts = texts if count is None else texts[:count]
    x = pack_texts(texts, tokenizer, seq_len)
    rows = len(texts)
    # The objective's own batch transform: the training pipeline's choice and masking.
    objective = get("electra")(list(tokenizer.vocabulary), ObjectiveOptions(seq_len=seq_len))
    transform = objective.batches
    keys = np.stack([np.full(rows, seed), np.arange(rows)], axis=-1)
    batch = transform(x["token_ids"], x["padding_mask"], keys)
    masked = Inputs(
        {**x, "token_ids": batch["x"]["token_ids"], "mask_positions": batch["x"]["mask_positions"]},
        source,
        batch["sw"]["mlm"],
    )
    positions = masked.x["mask_positions"]
    real = masked.mask_weights > 0  # (rows, masks)
    drawn = np.zeros_like(positions)
    rngs = [np.random.default_rng([seed, i, 1]) for i in range(rows)]
    if generator is None:
        pool = transform.masker.random_pool
        for i in range(rows):
            drawn[i] = rngs[i].choice(pool, size=positions.shape[1])
    else:
        specials = tokenizer.special_ids()
        for batch_rows, inputs in masked.batches(batch_size):
            logits = np.asarray(generator(inputs)["mlm"])  # (batch, masks, vocabulary)
            for row, row_logits in zip(batch_rows, logits):
                drawn[row] = draw_words(softmax(row_logits), specials, rngs[row])
    token_ids = masked.x["token_ids"].copy()
    for i in range(rows):
        token_ids[i, positions[i][real[i]]] = drawn[i][real[i]]
    labels = (token_ids != x["token_ids"]) & (x["padding_mask"] > 0)
    return ReplacedTokens(
        masked,
        Inputs({**x, "token_ids": token_ids}, source),
        labels.astype(np.float32),
        GENERATOR_SAMPLES if generator is not None else RANDOM_TOKENS,
    )


def dev_file(model_dir: str) -> str | None:
    """The first dev file listed in `model_dir`/metrics.json (as given, or
    relative to the model directory)."""
    from model.io.files import read_json_object

    path = os.path.join(model_dir, "metrics.json")
    if not os.path.isfile(path):
        return None
    files = read_json_object(path, "metrics").get("dev_files") or {}
    listed = list(files.values()) if isinstance(files, dict) else list(files)
    for candidate in listed[:1]:
        for option in (candidate, os.path.join(model_dir, candidate)):
            if os.path.isfile(option):
                return option
        raise FileNotFoundError(
            f"{path}: dev file {candidate!r} not found (give --data FILE; data= from Python)"
        )
    return None


def load(
    info: dict,
    tokenizer,
    seq_len: int,
    count: int,
    data: str | None = None,
    model_dir: str | None = None,
) -> Inputs:
    """Up to `count` real input rows for the model `info` (its config.json) describes."""
    task_name = info.get("finetuned_task")
    head = info.get("task", "encoder")
    if task_name:
        from model import tasks

        task = tasks.get(task_name)
        path = data or (dev_file(model_dir) if model_dir else None)
        if path is None:
            raise ValueError(
                f"{model_dir}: fine-tuned on {task_name}, but metrics.json names "
                f"no dev file: give --data FILE (data= from Python), a {task_name} file, to verify on"
            )
        examples = task.read_gold(path)
        if not examples:
            raise ValueError(f"{path}: no examples")
        # Encode only what is needed (a SQuAD question can make several windows).
        x = task.encode(examples[:count], tokenizer, seq_len).x
        return Inputs({k: v[:count] for k, v in x.items()}, path)
    texts, source = (
        (read_texts(data), data) if data else (list(BUILTIN_SENTENCES), "built-in sentences")
    )
    # A multiple-choice row is `n` consecutive texts (the model's number of choices, else 4).
    n = (info.get("num_choices") or 4) if head == "multiple_choice" else 1
    texts = texts[: count * n]
    x = pack_texts(texts, tokenizer, seq_len)
    if head == "multiple_choice":
        rows = len(texts) // n
        if rows == 0:
            raise ValueError(f"{source}: a multiple-choice model needs at least {n} lines")
        x = {k: v[: rows * n].reshape(rows, n, seq_len) for k, v in x.items()}
    if head == "pretraining":
        if tokenizer.mask_id is None:
            raise ValueError("the vocabulary has no [MASK] token for masked-LM inputs")
        x, weights = mask_tokens(x, tokenizer)
        return Inputs(x, source, weights)
    return Inputs(x, source)


def read_texts(path: str) -> list[str]:
    """The non-empty lines of a raw text file."""
    from model.io.files import reading

    with reading(path):
        with open(path, encoding="utf-8-sig") as f:  # a byte-order mark read past
            texts = [line.strip() for line in f if line.strip()]
    if not texts:
        raise ValueError(f"{path}: no text")
    return texts


def pack_texts(texts: list[str], tokenizer, seq_len: int) -> dict[str, np.ndarray]:
    """`[CLS] A [SEP] (B [SEP])` rows; a tab in a text separates A and B."""
    from model.tasks.base import encode_texts, pack_rows

    pairs = [t.split("\t", 1) if "\t" in t else [t, None] for t in texts]
    ids_a = encode_texts(tokenizer, [a for a, _ in pairs])
    seconds = [b for _, b in pairs if b is not None]
    ids_b = iter(encode_texts(tokenizer, seconds)) if seconds else iter(())
    return pack_rows(
        tokenizer, ids_a, [next(ids_b) if b is not None else None for _, b in pairs], seq_len
    )


def mask_tokens(x: dict, tokenizer, rate: float = MASK_RATE, seed: int = SEED):
    """About `rate` of each row's word pieces replaced by [MASK]; adds
    mask_positions (rows, masks), 0-padded. Returns (x, mask_weights)."""
    rng = np.random.default_rng(seed)
    token_ids = x["token_ids"].copy()
    special = set(tokenizer.special_ids())
    chosen = []
    for row, mask in zip(token_ids, x["padding_mask"]):
        words = [i for i in np.flatnonzero(mask) if int(row[i]) not in special]
        n = max(1, int(round(rate * len(words)))) if words else 0
        picked = np.sort(rng.choice(words, size=n, replace=False)) if n else np.zeros(0, int)
        row[picked] = tokenizer.mask_id
        chosen.append(picked)
    masks = max(1, max(len(c) for c in chosen))
    positions = np.zeros((len(chosen), masks), np.int32)
    weights = np.zeros((len(chosen), masks), np.float32)
    for i, c in enumerate(chosen):
        positions[i, : len(c)] = c
        weights[i, : len(c)] = 1.0
    return {**x, "token_ids": token_ids, "mask_positions": positions}, weights
