"""The edge runtime: a bundle behind its task methods, with numpy and LiteRT only.

    from export import runtime
    m = runtime.load("bundles/sst2")                  # -> EdgeModel
    m.classify("A gorgeous, witty, seductive movie.")
    # {"label": "positive", "scores": {"negative": 0.02, "positive": 0.98}, "value": None, ...}

    python -m export.runtime BUNDLE fill_mask "The capital of France is [MASK]." [TOP_K]
    python -m export.runtime BUNDLE classify "A gorgeous film." ["SECOND TEXT"]
    python -m export.runtime BUNDLE answer "Who wrote Hamlet?" "Shakespeare wrote Hamlet." [N_BEST]
    python -m export.runtime BUNDLE tag "Angela Merkel visited Paris."
    python -m export.runtime BUNDLE attention|features "The cat sat." ["SECOND TEXT"]
    python -m export.runtime BUNDLE detect_replaced "The cat ate on the mat."
    python -m export.runtime BUNDLE corrupt "The cat sat on the mat." [RATE [SEED]]
    python -m export.runtime BUNDLE --lines reviews.txt classify > results.jsonl

What this imports, directly or not: numpy, ai_edge_litert (`export.interpreter`,
only in `load`), the pure-Python tokenizer `model.text.wordpiece`, the numpy-only
task code of `model.tasks` and the masking of `model.pretraining.masking` (never
TensorFlow or Keras; `tests/test_runtime.py`
runs it in a virtual environment of `export/requirements-edge.txt` alone).
`export/README.md` is the contract; `EdgeModel(predict, tokenizer,
info)` also serves a Keras model (any `predict` returning the bundle's
outputs) so the app has one code path for both backends.

The tasks reuse the fine-tuning code, so a bundle answers as evaluation scores it:
  * answer: SQuAD's sliding windows (doc_stride 128, or half a window when
    windows are shorter; question cut to 64 tokens), n-best spans, max_answer_length 30, the null answer and the
    bundle's null_threshold for SQuAD v2.0 bundles, and the answer mapped back
    to the context's own characters (`model.tasks.squad_answers.postprocess`).
  * tag: the text is split into CoNLL-like words (whitespace, with leading
    and trailing punctuation, a comma or other separator between words
    ("Paris,London") and a final "'s" as words of their own; "U.S." and
    "1,000" stay one word); each word's tag is read at its first WordPiece, long
    texts run as several features (`model.tasks.ner.encode_sentences`), and
    entities are the conlleval chunks of the tags (`ner.chunks`), each with
    its character span and the mean probability of its words' tags.
  * fill_mask: "[MASK]" (any case) is cut out of the text and each piece
    tokenized on its own around the mask id: the brackets are punctuation,
    so the other tokens are exactly the whole text's.
  * classify: `[CLS] text [SEP]` at its own length (no padding); a text over
    max_seq_length is read in overlapping windows, as evaluation reads it
    (`model.tasks.glue.text_windows`: half a window apart, cut at sentence
    ends where one is near), and their probabilities averaged, each weighted
    by its WordPieces (`glue.combine_windows`); `windows`, `wordpieces` and
    `window_results` say how it was read. `long_texts="truncate"` cuts it
    instead (`truncated`: True), as training reads it. A pair `[CLS] A [SEP]
    B [SEP]` is always cut.
  * attention, features: `[CLS] A [SEP] (B [SEP])` at its own length (no
    padding); a text over max_seq_length is cut (`truncated`: True).
  * detect_replaced (ELECTRA's discriminator): `[CLS] text [SEP]`, the
    probability that each WordPiece was replaced (sigmoid of its logit;
    "replaced" above 0.5), with its characters in the text.
  * corrupt (an ELECTRA bundle's "generator" signature): pre-training's
    corruption of one text: `rate` of the WordPieces chosen as
    `model.pretraining.masking.Masker` chooses them (never [CLS], [SEP] or
    [UNK]), 85 % of them made [MASK] and the rest left as they are
    (ELECTRA's rates), then a token drawn from the generator's softmax at
    each chosen position (temperature 1, as the pre-trainer's Gumbel-max
    draws; special tokens left out, as a text cannot hold them: a trained
    generator gives them next to nothing) and written in; a draw equal to
    the original is not a replacement. A `seed` makes it repeatable; the
    text comes back with every changed word rewritten from its WordPieces.

Which methods a bundle serves: those of its task (`TASK_METHODS`), and those of
the task each other signature of its file is named after. A pre-training
bundle written by today's `python -m export` has an "encoder" signature, so it
serves fill_mask, attention and features (bundle.json's "methods" lists them);
an older one only fill_mask. An ELECTRA bundle's "encoder" signature is its
discriminator's encoder: detect_replaced, attention and features.
Bad input raises ValueError with a message for the user (empty text, no
[MASK], a method the bundle's task cannot do).
"""

from __future__ import annotations

import re
import sys

import numpy as np

from export import written_words
from model.pretraining.masking import Masker, MaskingConfig
from model.tasks import glue, ner, squad_answers, squad_examples, squad_windows
from model.tasks.base import ordered_labels, predict_in_batches, softmax
from model.text import wordpiece

TASK_METHODS = {
    "fill_mask": ("pretraining",),
    "classify": ("classifier",),
    "answer": ("question_answerer",),
    "tag": ("token_classifier",),
    "attention": ("encoder",),
    "features": ("encoder",),
    "detect_replaced": ("replaced_token_detection",),
    "corrupt": ("generator",),  # an ELECTRA bundle's "generator" signature
}
DEFAULT_TOP_K = 5  # fill_mask's predictions at each [MASK] unless asked
# ELECTRA's masking, as `model.objectives.electra.Electra` sets it (repeated here: that module
# imports Keras; tests/test_electra_bundle.py checks they agree): 15 % of the WordPieces
# chosen, 85 % of those made [MASK], none a random token (the rest stay as they are).
ELECTRA_MASK_RATE = 0.15
ELECTRA_MASK_TOKEN_RATE = 0.85
ELECTRA_RANDOM_TOKEN_RATE = 0.0
# A token is "replaced" when the discriminator's probability is above this (logit > 0).
REPLACED_THRESHOLD = 0.5
# QA windows / NER features run through the model this many at a time.
BATCH_SIZE = 8
_MASK = re.compile(r"\[mask\]", re.IGNORECASE)


def load(bundle_dir: str, num_threads: int = 2) -> EdgeModel:
    """The `EdgeModel` of a bundle directory written by `python -m export`, with
    every signature its bundle.json lists (one interpreter for all of them)."""
    from export import bundle
    from export.interpreter import TFLiteModel

    info = bundle.read_info(bundle_dir)
    model = TFLiteModel(
        bundle.model_path(bundle_dir),
        num_threads=num_threads,
        max_seq_length=info["max_seq_length"],
    )
    others = {}
    for key in bundle.signatures(info):
        if key == bundle.DEFAULT_SIGNATURE:
            continue
        if key not in model.signatures:
            raise ValueError(
                f"{bundle.model_path(bundle_dir)}: no {key!r} signature, which "
                f"bundle.json lists (found {model.signatures})"
            )
        others[key] = model.signature(key).predict
    tokenizer = wordpiece.WordPieceTokenizer(
        bundle.vocab_path(bundle_dir), lowercase=bool(info.get("lowercase", True))
    )
    edge = EdgeModel(model.predict, tokenizer, info, others)
    edge.path = bundle_dir
    return edge


def methods_of(task: str) -> list[str]:
    """The methods a model of `task` serves, in `TASK_METHODS`' order."""
    return [method for method, tasks in TASK_METHODS.items() if task in tasks]


class EdgeModel:
    """A model's `predict`, its tokenizer and its bundle.json, behind task methods.

    Args:
        predict: `predict({"token_ids", "segment_ids", "padding_mask"[,
            "mask_positions"]}) -> outputs`, int32 inputs (batch, length);
            outputs a dict of arrays named as in a bundle (`logits`,
            `start_logits`/`end_logits`, `topk_ids`/`topk_probs` or the
            pre-trainer's raw `mlm` logits, `sequence_output`/`pooled_output`/
            `attention_probs`, ELECTRA's `rtd`) or, for one-output heads, the
            array itself.
        tokenizer: a `model.text.wordpiece.WordPieceTokenizer` (or the TensorFlow one).
        info: bundle.json's fields; "task" and "max_seq_length" are required.
        signatures: {signature key: predict} of the model's other signatures,
            each with the outputs of the task `info["signatures"][key]["task"]`
            (default: the key itself), e.g. {"encoder": predict} for a
            pre-training bundle's encoder, {"generator": predict} (outputs
            `mlm`: logits over the vocabulary) for an ELECTRA bundle's generator.

    Attributes:
        methods: the methods this model serves (its task's and its signatures').

    Example:
    >>> m = EdgeModel(keras_model.predict_on_batch, tok,            # doctest: +SKIP
    ...               {"task": "classifier", "max_seq_length": 128})
    >>> m.classify("a fine film")["label"]                           # doctest: +SKIP
    '1'
    """

    def __init__(self, predict, tokenizer, info: dict, signatures: dict | None = None):
        for key in ("task", "max_seq_length"):
            if key not in info:
                raise ValueError(f"the model's info lacks {key!r} (a bundle.json has it)")
        self.predict = predict
        self.tokenizer = tokenizer
        self.info = dict(info)
        self.task = str(info["task"])
        listed = info.get("signatures") or {}
        # [(task, predict)]: the default signature first, so a method of the bundle's own
        # task always runs there.
        self._predicts = [(self.task, predict)] + [
            (str((listed.get(key) or {}).get("task", key)), fn)
            for key, fn in (signatures or {}).items()
        ]
        self.methods = list(
            dict.fromkeys(m for task, _ in self._predicts for m in methods_of(task))
        )
        self.max_seq_length = int(info["max_seq_length"])
        if self.max_seq_length < 8:
            raise ValueError(f"max_seq_length {self.max_seq_length} is too short for any text")
        self.path = None
        id2label = info.get("id2label")
        if id2label:
            self.labels = ordered_labels(id2label)
        elif self.task == "token_classifier" and info.get("finetuned_task") == "conll2003":
            self.labels = list(ner.CONLL2003_LABELS)
        else:
            self.labels = None
        # SQuAD settings (the fine-tuning defaults, as evaluation uses them).
        self.version_2 = (
            info.get("finetuned_task") == "squad2" or info.get("null_threshold") is not None
        )
        self.null_threshold = float(info.get("null_threshold") or 0.0)
        self.doc_stride = squad_windows.DOC_STRIDE
        self.max_query_length = min(squad_windows.MAX_QUERY_LENGTH, self.max_seq_length // 2)
        self.max_answer_length = squad_answers.MAX_ANSWER_LENGTH
        self._maskers: dict[float, Masker] = {}  # corrupt(): one per rate asked for

    def __repr__(self) -> str:
        where = f" {self.path!r}" if self.path else ""
        return (
            f"EdgeModel({self.task}{where}, finetuned_task={self.info.get('finetuned_task')!r}, "
            f"max_seq_length={self.max_seq_length}, methods={self.methods})"
        )

    # === fill_mask ===

    def fill_mask(self, text: str, top_k: int | None = None) -> dict:
        """The likeliest word pieces at each [MASK] of `text` (`top_k` of them; None: 5, or
        as many as the bundle keeps when fewer)."""
        self._require("fill_mask")
        _check_text(text, "text")
        kept = self.info.get("top_k")
        if top_k is None:
            top_k = min(DEFAULT_TOP_K, kept or DEFAULT_TOP_K)
        if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
            raise ValueError(f"top_k must be a positive whole number, not {top_k!r}")
        if kept and top_k > kept:
            raise ValueError(
                f"top_k {top_k}: this bundle keeps the {kept} likeliest WordPieces at each "
                f"[MASK] (bundle.json top_k); export it again with --top-k for more"
            )
        tok = self.tokenizer
        if tok.mask_id is None:
            raise ValueError("this model's vocabulary has no [MASK] token")
        parts = _MASK.split(text)
        if len(parts) == 1:
            raise ValueError(
                "no [MASK] in the text: write [MASK] where a word is missing, "
                'e.g. "The capital of France is [MASK]."'
            )
        ids, masks = [], []  # word-piece ids; the index in ids of each [MASK]
        for k, piece in enumerate(tok.encode(parts)):
            if k:
                masks.append(len(ids))
                ids.append(tok.mask_id)
            ids.extend(piece)
        budget = self.max_seq_length - 2
        start, truncated = 0, len(ids) > budget
        if truncated:  # a window of `budget` tokens centred on the masks, the first one in it
            centre = (masks[0] + masks[-1]) // 2
            start = max(0, min(centre - budget // 2, masks[0], len(ids) - budget))
            ids = ids[start : start + budget]
        kept = [k for k, m in enumerate(masks) if start <= m < start + budget]
        positions = [1 + masks[k] - start for k in kept]  # after [CLS]
        token_ids = np.array([[tok.cls_id, *ids, tok.sep_id]], np.int32)
        top_ids, top_probs = self._masked_lm(token_ids, positions, top_k)

        out_masks, fills = [], {}
        for k, position, pid, prob in zip(kept, positions, top_ids, top_probs):
            predictions = [
                {"token": tok.vocabulary[int(i)], "token_id": int(i), "score": float(p)}
                for i, p in zip(pid, prob)
            ]
            before = parts[k]  # the text right before this [MASK]
            glued = written_words.glued(before, k)
            best = written_words.best_word(
                predictions, set(tok.special_ids()), starts_word=not glued
            )
            fills[k] = written_words.written(predictions[best]["token"], glued, before)
            out_masks.append(
                {"position": position, "predictions": predictions, "best": best, "fill": fills[k]}
            )
        found = _MASK.findall(text)
        filled = parts[0] + "".join(
            fills.get(k, found[k]) + parts[k + 1] for k in range(len(found))
        )
        return {
            "tokens": [tok.vocabulary[int(i)] for i in token_ids[0]],
            "masks": out_masks,
            "filled": filled,
            "truncated": truncated,
        }

    def _masked_lm(self, token_ids: np.ndarray, positions: list[int], top_k: int):
        """(ids, probs), each (len(positions), k): the top-k at each position,
        in as many calls as the model's fixed number of mask positions asks."""
        per_call = _fixed_dim(self.info, "mask_positions", -1) or max(1, len(positions))
        x = {
            "token_ids": token_ids,
            "segment_ids": np.zeros_like(token_ids),
            "padding_mask": np.ones_like(token_ids),
        }
        ids, probs = [], []
        for i in range(0, len(positions), per_call):
            chunk = positions[i : i + per_call]
            mask_positions = np.zeros((1, per_call), np.int32)  # padded with [CLS], ignored
            mask_positions[0, : len(chunk)] = chunk
            out = _as_dict(self.predict({**x, "mask_positions": mask_positions}), "mlm")
            if "topk_ids" in out and "topk_probs" in out:
                chunk_ids = np.asarray(out["topk_ids"])[0, : len(chunk), :top_k]
                chunk_probs = np.asarray(out["topk_probs"], np.float64)[0, : len(chunk), :top_k]
            elif "mlm" in out:  # a Keras pre-trainer: logits over the vocabulary
                p = softmax(np.asarray(out["mlm"])[0, : len(chunk)])
                chunk_ids = np.argsort(-p, axis=-1, kind="stable")[:, :top_k]
                chunk_probs = np.take_along_axis(p, chunk_ids, axis=-1)
            else:
                raise ValueError(
                    f"the model's outputs {sorted(out)} have no masked-LM "
                    f"predictions (topk_ids/topk_probs or mlm)"
                )
            size = len(self.tokenizer.vocabulary)
            if chunk_ids.size and int(chunk_ids.max()) >= size:
                raise ValueError(
                    f"the model predicts WordPiece id {int(chunk_ids.max())}, beyond the "
                    f"{size} lines of its vocab.txt: the bundle's vocab.txt is not its model's"
                )
            ids.extend(chunk_ids)
            probs.extend(chunk_probs)
        return ids, probs

    # === classify ===

    def classify(
        self, text: str, text_pair: str | None = None, long_texts: str = "windows"
    ) -> dict:
        """Label probabilities (or a regression value, e.g. STS-B) of a text (pair).

        A single text longer than the model is read in windows (`long_texts="windows"`)
        or cut (`"truncate"`); see the module docstring. Besides label, scores, value and
        truncated: `windows` (model inputs read), `wordpieces` (the text's, both texts'
        for a pair), `window_wordpieces` (the most one input holds) and, for a single
        text, `window_results`: each window's [start, end) in the text's WordPieces and
        characters, its weight in the verdict and its own label, scores or value.
        """
        self._require("classify")
        if long_texts not in glue.LONG_TEXTS:
            raise ValueError(f"long_texts must be one of {glue.LONG_TEXTS}, not {long_texts!r}")
        self._check_pairing(text_pair)
        x, n, truncated, encoded = self._packed(text, text_pair)
        single = len(encoded) == 1
        if single and truncated and long_texts == "windows":
            return self._classify_windows(text, encoded[0])
        logits = np.asarray(_output(self.predict(x), "logits"), np.float64).reshape(-1)
        reading = {
            "windows": 1,
            "wordpieces": sum(map(len, encoded)),
            "window_wordpieces": self.max_seq_length - 1 - len(encoded),
        }
        result = {**self._scores(logits), "truncated": truncated, **reading}
        if single:
            pieces = self.pieces(text)
            result["window_results"] = [
                {**self._window(pieces, 0, n - 2, 1.0), **self._scores(logits)}
            ]
        return result

    def _check_pairing(self, text_pair: str | None) -> None:
        """A model fine-tuned on a GLUE task reads what that task gives it: one text (SST-2,
        CoLA) or a pair (MNLI, MRPC, ...); the other is refused (it answered anyway)."""
        name = self.info.get("finetuned_task")
        pairs = glue.reads_pairs(name)
        if pairs is None or pairs == bool(text_pair):  # "": no pair
            return
        wants = "a pair of texts (text and text_pair)" if pairs else "one text (no text_pair)"
        raise ValueError(f"this model was fine-tuned on {name.upper()}, which reads {wants}")

    def _classify_windows(self, text: str, ids: list[int]) -> dict:
        """`classify` of a text longer than the model: its windows, combined."""
        windows = glue.encode_windows(self.tokenizer, [ids], self.max_seq_length)
        logits = predict_in_batches(
            lambda b: _output(self.predict(b), "logits"), windows.x, BATCH_SIZE
        )
        logits = np.asarray(logits, np.float64).reshape(len(windows.owner), -1)
        regression = logits.shape[1] == 1 and not self.labels
        combined = glue.combine_windows(logits, windows.owner, windows.weights, 1, regression)[0]
        if regression:
            verdict = {"label": None, "scores": {}, "value": float(combined[0])}
        else:
            names = self._label_names(combined.size)
            verdict = {
                "label": names[int(np.argmax(combined))],
                "scores": {name: float(p) for name, p in zip(names, combined)},
                "value": None,
            }
        pieces = self.pieces(text)
        share = windows.weights / windows.weights.sum()
        return {
            **verdict,
            "truncated": False,
            "windows": len(windows.owner),
            "wordpieces": len(ids),
            "window_wordpieces": self.max_seq_length - 2,
            "window_results": [
                {**self._window(pieces, int(start), int(end), float(w)), **self._scores(row)}
                for (start, end), w, row in zip(windows.spans, share, logits)
            ],
        }

    def _scores(self, logits: np.ndarray) -> dict:
        """{"label", "scores", "value"} of one input's logits (one value: a regression)."""
        if logits.size == 1 and not self.labels:  # regression
            return {"label": None, "scores": {}, "value": float(logits[0])}
        names = self._label_names(logits.size)
        probs = softmax(logits)
        return {
            "label": names[int(np.argmax(probs))],
            "scores": {name: float(p) for name, p in zip(names, probs)},
            "value": None,
        }

    @staticmethod
    def _window(pieces: list, start: int, end: int, weight: float) -> dict:
        """A window's WordPieces [start, end), the characters they cover, and its weight."""
        last = len(pieces) - 1  # pieces and the tokenizer's ids agree but for odd Unicode
        empty = last < 0 or end <= start
        return {
            "start": start,
            "end": end,
            "char_start": 0 if empty else pieces[min(start, last)][1],
            "char_end": 0 if empty else pieces[min(end - 1, last)][2],
            "weight": weight,
        }

    # === answer ===

    def answer(self, question: str, context: str, n_best: int = 20) -> dict:
        """The span of `context` that answers `question` (SQuAD), with its n-best list."""
        self._require("answer")
        _check_text(question, "question")
        _check_text(context, "context")
        if not isinstance(n_best, int) or isinstance(n_best, bool) or n_best < 1:
            raise ValueError(f"n_best must be a positive whole number, not {n_best!r}")
        example = squad_examples.SquadExample(
            "question", question, squad_examples.Paragraph(context), answers=[]
        )
        x, windows, truncated = self._qa_features(example)
        outputs = predict_in_batches(self.predict, x, BATCH_SIZE, sequence_outputs=True)
        start_logits, end_logits = squad_answers.split_logits(outputs)
        found = squad_answers.postprocess(
            [example],
            windows,
            x["token_ids"],
            start_logits,
            end_logits,
            self.tokenizer.vocabulary,
            self.tokenizer.lowercase,
            n_best,
            self.max_answer_length,
            self.version_2,
            self.null_threshold,
        )
        nbest = []
        for entry, window in zip(found.nbest["question"], found.windows["question"]):
            begin = entry.get("answer_start", -1)  # absent: the null answer (or no span at all)
            nbest.append(
                {
                    "text": entry["text"] if begin >= 0 else "",
                    "start": begin,
                    "end": begin + len(entry["text"]) if begin >= 0 else -1,
                    "score": entry["start_logit"] + entry["end_logit"],
                    "probability": entry["probability"],
                    "span_probability": squad_answers.span_probability(
                        entry, window, start_logits, end_logits, x["padding_mask"]
                    ),
                }
            )
        null = next((e for e in nbest if e["start"] < 0), None)
        prediction = found.predictions["question"]
        best = next((e for e in nbest if e["start"] >= 0 and e["text"] == prediction), None)
        if best is None or (self.version_2 and prediction == ""):
            best = null or {"text": "", "start": -1, "end": -1, "score": 0.0}
        return {
            "text": best["text"],
            "start": best["start"],
            "end": best["end"],
            "score": float(best["score"]),
            "null_score": float(null["score"]) if self.version_2 and null else None,
            "span_probability": best.get("span_probability") if best["start"] >= 0 else None,
            "null_probability": null.get("span_probability") if self.version_2 and null else None,
            "no_answer": best["start"] < 0,
            "nbest": nbest,
            "windows": len(windows.example_index),
            "truncated": truncated,
        }

    def _qa_features(self, example: squad_examples.SquadExample):
        """The windows of one question (`squad_windows.encode_squad`, with this
        runtime's pure-Python tokenizer). Returns (x, squad_windows.Windows, whether
        the question was cut to `max_query_length`)."""
        question = self.tokenizer.encode([example.question])[0]
        if not question:
            raise ValueError("the question has no words the model can read")
        if not any(self.tokenizer.encode(example.paragraph.words)):
            raise ValueError("the context has no words the model can read")
        query = min(len(question), self.max_query_length)
        encoded = squad_windows.encode_squad(
            [example],
            self.tokenizer,
            self.max_seq_length,
            self.qa_stride(query),
            self.max_query_length,
        )
        return encoded.x, encoded.meta, len(question) > query

    def qa_stride(self, query_tokens: int) -> int:
        """Tokens between window starts: `doc_stride` (128), or half a window
        when windows are shorter (a bundle of under ~320 tokens), so that
        consecutive windows always overlap."""
        room = self.max_seq_length - query_tokens - 3  # [CLS] question [SEP] ... [SEP]
        return max(1, min(self.doc_stride, room // 2))

    # === tag ===

    def tag(self, text: str) -> dict:
        """A tag for every word of `text` and the entities those tags make."""
        self._require("tag")
        _check_text(text, "text")
        spans = self.tag_words(text)
        if not spans:
            raise ValueError("the text has no words the model can read")
        words = [text[s:e] for s, e in spans]
        x, _, fmap = ner.encode_sentences([words], None, self.tokenizer, self.max_seq_length)
        logits = predict_in_batches(
            lambda b: _output(self.predict(b), "logits"), x, BATCH_SIZE, sequence_outputs=True
        )
        probs = fmap.to_words(softmax(np.asarray(logits, np.float64)), [len(words)])[0]
        names = self._label_names(probs.shape[-1])
        best = probs.argmax(-1)
        tags = [names[i] for i in best]
        scores = probs[np.arange(len(words)), best]
        out_words = [
            {"word": w, "start": s, "end": e, "tag": t, "score": float(p)}
            for w, (s, e), t, p in zip(words, spans, tags, scores)
        ]
        entities = []
        for first, last, kind in sorted(ner.chunks(tags)):
            begin, end = spans[first][0], spans[last][1]
            entities.append(
                {
                    "type": kind,
                    "text": text[begin:end],
                    "start": begin,
                    "end": end,
                    "score": float(np.mean(scores[first : last + 1])),
                }
            )
        return {"words": out_words, "entities": entities, "truncated": False}

    def tag_words(self, text: str) -> list[tuple[int, int]]:
        """[start, end) character spans of the CoNLL-like words of `text` (see
        the module docstring): "(Reuters) U.S. troops, Germany's" -> "(",
        "Reuters", ")", "U.S.", "troops", ",", "Germany", "'s"."""
        groups: dict[int, list] = {}
        for word in self.tokenizer.words(text):
            groups.setdefault(word.chunk, []).append(word)
        spans = []
        for chunk in (part for group in groups.values() for part in _separated(group)):
            punct = [len(w.text) == 1 and wordpiece.is_punctuation(w.text) for w in chunk]
            i, j = 0, len(chunk)
            while i < j and punct[i]:
                i += 1
            while j > i and punct[j - 1]:
                j -= 1
            # An abbreviation keeps its final period ("U.S.", "a.m.").
            if (
                i < j < len(chunk)
                and chunk[j].text == "."
                and any(w.text == "." for w in chunk[i:j])
            ):
                j += 1
            # A possessive "'s" is a word of its own, as in CoNLL ("Germany 's").
            split = j
            if j - i >= 3 and chunk[j - 1].text == "s" and chunk[j - 2].text in ("'", "\u2019"):
                split = j - 2
            spans += [(w.start, w.end) for w in chunk[:i]]
            if i < split:
                spans.append((chunk[i].start, chunk[split - 1].end))
            if split < j:
                spans.append((chunk[split].start, chunk[j - 1].end))
            spans += [(w.start, w.end) for w in chunk[j:]]
        return spans

    # === attention, features ===

    def attention(self, text: str, text_pair: str | None = None) -> dict:
        """Every layer's and head's attention probabilities over the tokens (an
        encoder bundle's, or a pre-training or ELECTRA bundle's "encoder" signature's)."""
        predict = self._require("attention")
        x, n, truncated = self._pack(text, text_pair)
        out = _as_dict(predict(x), "attention_probs")
        if "attention_probs" not in out:
            raise ValueError(f"the model's outputs {sorted(out)} have no attention_probs")
        attention = np.asarray(out["attention_probs"], np.float32)[0, :, :, :n, :n]
        return {
            "tokens": self._tokens(x, n),
            "segment_ids": x["segment_ids"][0, :n].tolist(),
            "attention": attention,
            "truncated": truncated,
        }

    def features(self, text: str, text_pair: str | None = None) -> dict:
        """The encoder's final hidden states and its pooled [CLS] vector."""
        predict = self._require("features")
        x, n, truncated = self._pack(text, text_pair)
        out = _as_dict(predict(x), "sequence_output")
        missing = [k for k in ("sequence_output", "pooled_output") if k not in out]
        if missing:
            raise ValueError(f"the model's outputs {sorted(out)} lack {missing}")
        return {
            "tokens": self._tokens(x, n),
            "sequence_output": np.asarray(out["sequence_output"], np.float32)[0, :n],
            "pooled_output": np.asarray(out["pooled_output"], np.float32)[0],
            "truncated": truncated,
        }

    # === detect_replaced, corrupt (ELECTRA) ===

    def detect_replaced(self, text: str) -> dict:
        """ELECTRA's discriminator on `text`: for every WordPiece the probability that it
        was replaced (it is not what the original text had there)."""
        predict = self._require("detect_replaced")
        _check_text(text, "text")
        pieces = self.pieces(text)
        if not pieces:
            raise ValueError("the text has no words the model can read")
        budget = self.max_seq_length - 2
        truncated, pieces = len(pieces) > budget, pieces[:budget]
        tok = self.tokenizer
        token_ids = np.array([[tok.cls_id, *(p[0] for p in pieces), tok.sep_id]], np.int32)
        x = {
            "token_ids": token_ids,
            "segment_ids": np.zeros_like(token_ids),
            "padding_mask": np.ones_like(token_ids),
        }
        logits = np.asarray(_output(predict(x), "rtd"), np.float64).reshape(-1)
        if logits.size != token_ids.shape[1]:
            raise ValueError(
                f"the model's rtd output has {logits.size} values for {token_ids.shape[1]} tokens"
            )
        probs = sigmoid(logits[1:-1])  # the text's pieces, not [CLS] and [SEP]
        tokens = [
            {
                "token": tok.vocabulary[i],
                "start": start,
                "end": end,
                "probability_replaced": float(p),
                "replaced": bool(p > REPLACED_THRESHOLD),
            }
            for (i, start, end, _), p in zip(pieces, probs)
        ]
        return {
            "tokens": tokens,
            "replaced": [k for k, t in enumerate(tokens) if t["replaced"]],
            "read": [tok.vocabulary[int(i)] for i in token_ids[0]],
            "truncated": truncated,
        }

    def corrupt(self, text: str, rate: float = ELECTRA_MASK_RATE, seed: int | None = None) -> dict:
        """`text` corrupted as ELECTRA's pre-training corrupts its input (the module
        docstring): the generator's samples written in at `rate` of its WordPieces."""
        predict = self._require("corrupt")
        _check_text(text, "text")
        seed = _check_corruption(rate, seed)
        tok = self.tokenizer
        if tok.mask_id is None:
            raise ValueError("this model's vocabulary has no [MASK] token")
        pieces = self.pieces(text)
        if not pieces:
            raise ValueError("the text has no words the model can read")
        budget = self.max_seq_length - 2
        truncated, pieces = len(pieces) > budget, pieces[:budget]
        original = np.array([tok.cls_id, *(p[0] for p in pieces), tok.sep_id], np.int32)
        rng = np.random.default_rng(int(seed))
        masked, positions, _, weights = self._masker(float(rate))(original, rng)
        positions = positions[weights > 0]  # (chosen,) token indices, [CLS] = 0
        corrupted = masked.copy()
        probabilities = np.zeros(len(original))
        if len(positions):
            drawn, probabilities[positions] = self._draw(predict, masked, positions, rng)
            corrupted[positions] = drawn
        chosen = set(positions.tolist())
        vocab = tok.vocabulary
        tokens = [
            {
                "token": vocab[int(corrupted[k + 1])],
                "original": vocab[int(original[k + 1])],
                "start": start,
                "end": end,
                "masked": k + 1 in chosen,
                "replaced": bool(corrupted[k + 1] != original[k + 1]),
                "probability": float(probabilities[k + 1]) if k + 1 in chosen else None,
            }
            for k, (_, start, end, _) in enumerate(pieces)
        ]
        return {
            "text": written_words.rewrite(text, pieces, [int(i) for i in corrupted[1:-1]], vocab),
            "tokens": tokens,
            "masked": [k for k, t in enumerate(tokens) if t["masked"]],
            "replaced": [k for k, t in enumerate(tokens) if t["replaced"]],
            "read": [vocab[int(i)] for i in corrupted],
            "generator_read": [vocab[int(i)] for i in masked],
            "rate": float(rate),
            "seed": int(seed),
            "truncated": truncated,
        }

    def _draw(self, predict, masked, positions, rng) -> tuple[np.ndarray, np.ndarray]:
        """(the generator's sample at each of `positions` of `masked` (token ids), its
        probability): words only, as the pre-trainer draws them."""
        x = {
            "token_ids": masked[None],
            "segment_ids": np.zeros_like(masked)[None],
            "padding_mask": np.ones_like(masked)[None],
            "mask_positions": positions[None].astype(np.int32),
        }
        out = _as_dict(predict(x), "mlm")
        if "mlm" not in out:
            raise ValueError(f"the model's outputs {sorted(out)} have no generator logits (mlm)")
        probs = softmax(np.asarray(out["mlm"])[0, : len(positions)])  # (chosen, vocab)
        drawn = draw_words(probs, self.tokenizer.special_ids(), rng)
        return drawn, probs[np.arange(len(positions)), drawn]

    def _masker(self, rate: float) -> Masker:
        if rate not in self._maskers:
            config = MaskingConfig(
                mask_rate=rate,
                mask_token_rate=ELECTRA_MASK_TOKEN_RATE,
                random_token_rate=ELECTRA_RANDOM_TOKEN_RATE,
                max_predictions=self.max_seq_length,  # `rate` alone sets how many
            )
            self._maskers[rate] = Masker(self.tokenizer.vocabulary, config)
        return self._maskers[rate]

    def pieces(self, text: str) -> list[tuple[int, int, int, int]]:
        """(id, start, end, word) of every WordPiece of `text`, in `encode`'s order: its
        [start, end) characters in `text` and the index of its word. A piece spans its own
        characters where its word's pieces spell the word as written, up to case and
        accents ("Running" -> "run" 0-3, "##ning" 3-7), else (an [UNK], a word whose
        normalisation changes its length) the whole word's."""
        vocab, out = self.tokenizer.vocabulary, []
        for w, word in enumerate(self.tokenizer.words(text)):
            lengths = [len(vocab[i]) - 2 * vocab[i].startswith("##") for i in word.ids]
            spelled = word.end - word.start == len(word.text) == sum(lengths)
            exact = spelled and self.tokenizer.unk_id not in word.ids
            start = word.start
            for i, n in zip(word.ids, lengths):
                end = start + n if exact else word.end
                out.append((int(i), start if exact else word.start, end, w))
                start = end
        return out

    # === Helpers ===

    def _require(self, method: str):
        """The predict that serves `method`; ValueError for the user when none does."""
        tasks = TASK_METHODS[method]
        for task, predict in self._predicts:
            if task in tasks:
                return predict
        needs = " or ".join(_a(t) for t in tasks) + " bundle"
        if method == "corrupt":
            needs = (
                'a replaced_token_detection bundle with a "generator" signature (exported '
                "from an ELECTRA pre-training run, python -m model.train pretrain --objective "
                "electra; a discriminator's model directory has no generator)"
            )
        if "encoder" in tasks:  # attention, features
            from export.bundle import ENCODER_SIGNATURE_TASKS

            needs += f" (or {' or '.join(_a(t) for t in ENCODER_SIGNATURE_TASKS)} bundle with "
            needs += 'an "encoder" signature'
            needs += (
                ": this one was exported without it; export it again with python -m export)"
                if self.task in ENCODER_SIGNATURE_TASKS
                else ")"
            )
        raise ValueError(f"this is {_a(self.task)} bundle; {method}() needs {needs}")

    def _pack(self, text: str, text_pair: str | None):
        """({inputs}, real length, truncated) of `[CLS] A [SEP] (B [SEP])`, cut to its length."""
        return self._packed(text, text_pair)[:3]

    def _packed(self, text: str, text_pair: str | None):
        """`_pack`'s answer and the texts' WordPiece ids ([A] or [A, B])."""
        _check_text(text, "text")
        text_pair = _second_text(text_pair)
        texts = [text] if text_pair is None else [text, text_pair]
        encoded = self.tokenizer.encode(texts)
        if not encoded[0]:
            raise ValueError("the text has no words the model can read")
        first, second = encoded[0], encoded[1] if text_pair is not None else None
        needed = len(first) + 2 + (len(second) + 1 if second is not None else 0)
        ids, segments, mask = self.tokenizer.pack(first, second, self.max_seq_length)
        n = int(mask.sum())
        x = {
            "token_ids": ids[None, :n],
            "segment_ids": segments[None, :n],
            "padding_mask": mask[None, :n],
        }
        return x, n, needed > self.max_seq_length, encoded[: len(texts)]

    def _tokens(self, x: dict, n: int) -> list[str]:
        return [self.tokenizer.vocabulary[int(i)] for i in x["token_ids"][0, :n]]

    def _label_names(self, n: int) -> list[str]:
        if self.labels and len(self.labels) == n:
            return list(self.labels)
        return [str(i) for i in range(n)]


# === Functions ===


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function, in float64, without overflow warnings."""
    x = np.asarray(x, np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def draw_words(probs: np.ndarray, special_ids, rng: np.random.Generator) -> np.ndarray:
    """The generator's draw at each row of `probs` (..., vocabulary), as the pre-trainer draws
    it (ElectraPretrainer's excluded_ids): among the tokens that are not `special_ids`
    ([CLS], [SEP], [MASK]... cannot be written into a text); a row with no mass left on
    them draws from all."""
    probs = np.asarray(probs)
    words = probs.copy()
    words[..., list(special_ids)] = 0.0
    return sample_tokens(np.where(words.sum(-1, keepdims=True) > 0, words, probs), rng)


def sample_tokens(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw from each distribution over the last axis of `probs` (e.g. `softmax` of
    logits): the token where the running sum passes a uniform draw. The same law as the
    pre-trainer's Gumbel-max at temperature 1, with one random number a row instead of one
    per word of the vocabulary."""
    cumulative = np.cumsum(np.asarray(probs, np.float64), axis=-1)
    u = rng.random(cumulative.shape[:-1] + (1,)) * cumulative[..., -1:]
    return np.minimum((cumulative <= u).sum(-1), cumulative.shape[-1] - 1)


# Punctuation that parts two words written without a space ("Paris,London", "yes;no") and is
# never inside a CoNLL-2003 word, but for a comma between digits ("1,000", "12,900-13,100").
_SEPARATORS = frozenset(',;!?"()[]{}')


def _separated(chunk: list) -> list[list]:
    """A whitespace chunk's words cut at each separator, which stands alone."""
    parts, current = [], []
    for k, w in enumerate(chunk):
        in_number = (
            w.text == ","
            and 0 < k < len(chunk) - 1
            and chunk[k - 1].text[-1].isdigit()
            and chunk[k + 1].text[0].isdigit()
        )
        if w.text in _SEPARATORS and not in_number:
            parts += [current, [w]] if current else [[w]]
            current = []
        else:
            current.append(w)
    return parts + [current] if current else parts


def _a(word: str) -> str:
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"


def _second_text(text_pair):
    """The optional second text: None for an empty box; ValueError for a non-string."""
    if text_pair is not None and not isinstance(text_pair, str):
        raise ValueError(f"the second text must be a string, not {type(text_pair).__name__}")
    if text_pair is not None and not text_pair.strip():
        return None  # an empty optional box
    return text_pair


def _check_corruption(rate, seed) -> int:
    """`corrupt`'s seed, drawn when None; ValueError for a rate outside (0, 1] or a
    seed that is not a whole number, 0 or more."""
    number = (int, float, np.integer, np.floating)
    if isinstance(rate, bool) or not isinstance(rate, number) or not 0 < rate <= 1:
        raise ValueError(f"rate must be a number above 0 and at most 1, not {rate!r}")
    if seed is None:
        return int(np.random.default_rng().integers(2**31))
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be a whole number, 0 or more, not {seed!r}")
    return seed


def _check_text(text, what: str) -> None:
    if not isinstance(text, str):
        raise ValueError(f"the {what} must be a string, not {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"the {what} is empty")


def _as_dict(outputs, single: str) -> dict:
    """A model's outputs as {name: array}; a bare array is named `single`."""
    if isinstance(outputs, dict):
        return outputs
    if isinstance(outputs, (list, tuple)):
        raise ValueError(f"the model returned {len(outputs)} unnamed outputs; return a dict")
    return {single: outputs}


def _output(outputs, name: str) -> np.ndarray:
    """The output `name` (or the only one) of what `predict` returned."""
    if not isinstance(outputs, dict):
        return np.asarray(outputs)
    if name in outputs:
        return np.asarray(outputs[name])
    if len(outputs) == 1:
        return np.asarray(next(iter(outputs.values())))
    raise ValueError(f"the model's outputs {sorted(outputs)} have no {name!r}")


def _fixed_dim(info: dict, name: str, axis: int) -> int | None:
    """The fixed size of axis `axis` of input `name` in bundle.json, or None if dynamic."""
    shape = (info.get("inputs") or {}).get(name)
    if not shape:
        return None
    size = shape[axis]
    return int(size) if isinstance(size, int) and size > 0 else None


def main(argv=None) -> int:
    """`python -m export.runtime BUNDLE METHOD ...`: the command line
    (`export/runtime_command.py`)."""
    from export import runtime_command

    return runtime_command.main(argv)


if __name__ == "__main__":
    sys.exit(main())
