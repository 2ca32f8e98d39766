"""The data stage of `python -m model.train pretrain`: the records, their vocabulary and the
objective that trains on them, checked against each other and the flags. Framework-free, so
`model.train` runs it before TensorFlow loads (a mismatch is said in well under a second) and
the run itself uses what it returns.
"""

from __future__ import annotations

import os
import types

from model import objectives
from model.pretraining.masking import MaskingConfig
from model.pretraining.records import find_records, made_otherwise
from model.text.wordpiece import load_vocabulary, vocabulary_sha256


def checked_data(args) -> types.SimpleNamespace:
    """The records (`info`, `eval_info`), their vocabulary (`vocabulary`, `vocab_path`,
    `seq_len`) and the objective that trains on them (`objective`), checked against each other
    and the flags: a ValueError names the file and the flag."""
    files, info = find_records(args.data)
    seq_len = info["max_seq_length"]
    if args.seq_len is not None and args.seq_len != seq_len:
        raise ValueError(
            f"--seq-len {args.seq_len} differs from the records' {seq_len} ({args.data}); "
            "make records of that length with python -m model.data"
        )
    vocab_path = args.vocab or os.path.join(os.path.dirname(files[0]), "vocab.txt")
    vocabulary = load_vocabulary(vocab_path)
    if "[MASK]" not in vocabulary:
        raise ValueError(f"{vocab_path}: the vocabulary has no [MASK] token")
    if args.vocab and info.get("vocab_sha256") not in (None, vocabulary_sha256(args.vocab)):
        raise ValueError(
            f"--vocab {args.vocab}: not the vocabulary {args.data} was made with (its "
            f"dataset.json's vocab_sha256); leave --vocab out, or make the records with it"
        )
    if args.init_checkpoint:
        check_init_vocabulary(args.init_checkpoint, vocabulary, vocab_path)
    objective = objectives.get(args.objective)(
        vocabulary,
        objectives.ObjectiveOptions(
            seq_len=seq_len,
            mask_rate=args.mask_rate,
            mask_token_rate=args.mask_token_rate,
            random_token_rate=args.random_token_rate,
            max_predictions=args.max_predictions,
            whole_word=args.whole_word_masking,
            next_sentence=not args.no_nsp,
            generator_size=args.generator_size,
            discriminator_weight=args.discriminator_weight,
        ),
    )
    objective.check_records(args.data, info)
    eval_info = find_records(args.eval_data)[1] if args.eval_data else None
    check_static(args, info, eval_info)
    if eval_info is not None:
        check_held_out(args.eval_data, eval_info, info, objective)
    return types.SimpleNamespace(
        info=info,
        eval_info=eval_info,
        vocab_path=vocab_path,
        vocabulary=vocabulary,
        seq_len=seq_len,
        objective=objective,
    )


def check_held_out(pattern: str, eval_info: dict, info: dict, objective) -> None:
    """Held-out records (--eval-data) the objective trains on, of the training records' length,
    vocabulary and casing: held out as the model reads its text."""
    objective.check_records(pattern, eval_info)
    if eval_info["max_seq_length"] != info["max_seq_length"]:
        raise ValueError(
            f"{pattern}: records of {eval_info['max_seq_length']} tokens, "
            f"the training records' are {info['max_seq_length']}"
        )
    differs = made_otherwise(info, eval_info, ("lowercase", "vocab_sha256"))
    if differs:
        key, mine, theirs = differs
        raise ValueError(
            f"{pattern}: records with {key} {theirs!r}, unlike the training "
            f"records' ({mine!r}); make them with the same vocabulary and casing"
        )


def check_static(args, info: dict, eval_info: dict | None) -> None:
    """Records masked when made (model.data --masking static), and held-out ones too where
    given, take no masking flags: they were ignored, silently (held-out records masked at
    run time do take them)."""
    given = {
        "--mask-rate": args.mask_rate != MaskingConfig.mask_rate,
        "--mask-token-rate": args.mask_token_rate is not None,
        "--random-token-rate": args.random_token_rate is not None,
        "--max-predictions": args.max_predictions is not None,
        "--whole-word-masking": args.whole_word_masking,
    }
    named = [flag for flag, on in given.items() if on]
    static = [i.get("masking") == "static" for i in (info, eval_info) if i is not None]
    if named and all(static):
        raise ValueError(
            f"{', '.join(named)}: {args.data} holds records masked when they were made "
            "(model.data --masking static), which these flags do not change: leave them out, "
            "or make the records with --masking dynamic"
        )


def check_init_vocabulary(path: str, vocabulary: list[str], records_vocab: str) -> None:
    """--init's vocabulary (where its folder holds one) must be the records': another would
    train each embedding row on other words' ids, silently."""
    if not os.path.isdir(path):
        return
    for name in ("vocab.txt", os.path.join("assets", "tokenizer", "vocabulary.txt")):
        theirs = os.path.join(path, name)
        if os.path.isfile(theirs):
            if load_vocabulary(theirs) != vocabulary:
                raise ValueError(
                    f"--init {path}: its vocabulary ({theirs}) is not the one the records were "
                    f"made with ({records_vocab}); make the records with --vocab {theirs}"
                )
            return
