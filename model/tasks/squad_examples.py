"""SQuAD's examples: the official JSON format read strictly into questions on paragraphs
(`model.tasks.squad` is the task; `squad_windows` turns examples into model inputs).

Files are read strictly: a missing field, a wrong type, a duplicate question
id or a first answer whose `answer_start` is past the context (out of range)
or whose text is not the context at `answer_start` (mismatch) stops the reader
with the file and the article/paragraph/question; `skip_invalid=True` (the
commands' --skip-invalid) skips such questions and counts them instead. Only the first answer's place is read
(training's span, as in Google's reader), and only in a training file: the
other answers, and every answer of a file only scored (`read_gold`: evaluate's
file, fine-tuning's dev file), are gold texts, scored by text as the official
scripts score them.
"""

from __future__ import annotations

import bisect
import dataclasses
import re

from model.io.files import load_json

# google-research's `is_whitespace`: only these split a context into words.
_WORD = re.compile(r"[^ \t\r\n\u202f]+")


class Paragraph:
    """A context and its whitespace-separated words (google's `doc_tokens`).

    `starts[i]` is the character offset of `words[i]`; a word is a maximal run
    of non-whitespace characters, so `context[starts[i]:starts[i] + len(words[i])]`
    is `words[i]`.
    """

    __slots__ = ("context", "words", "starts")

    def __init__(self, context: str):
        self.context = context
        matches = list(_WORD.finditer(context))
        self.words = [m.group() for m in matches]
        self.starts = [m.start() for m in matches]

    def char_to_word(self, char: int) -> int:
        """google's `char_to_word_offset`: the word at `char`, or the word
        before it when `char` is whitespace (-1 before the first word)."""
        return bisect.bisect_right(self.starts, char) - 1

    def word_end(self, word: int) -> int:
        return self.starts[word] + len(self.words[word])


@dataclasses.dataclass
class SquadExample:
    """One question on one paragraph (shared by the paragraph's questions).

    answers: the gold answers, `{"text", "answer_start"}` in file order; []
        for an unanswerable (SQuAD v2.0) question.
    """

    qas_id: str
    question: str
    paragraph: Paragraph
    answers: list
    is_impossible: bool = False
    title: str = ""

    @property
    def context(self) -> str:
        return self.paragraph.context


def read_squad(path: str, version_2: bool, skip_invalid: bool = False, spans: bool = True):
    """Examples of an official-format SQuAD file (`data` / `paragraphs` / `qas`).

    `spans`: the first answer's `answer_start` must place its text in the context (the
    span a training question learns); False for a file only scored, whose answers the
    official scripts read by text alone.

    Returns:
        (examples, skipped): `skipped` lists the message of each question left
        out (only with `skip_invalid`; otherwise the first one raises).
    """
    dataset = load_json(path)
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        raise ValueError(f'{path}: not a SQuAD file: the top level needs a "data" list')
    examples, skipped, seen = [], [], {}
    for ai, article in enumerate(dataset["data"]):
        where_article = f"{path}: data[{ai}]"
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise ValueError(f'{where_article}: an article needs a "paragraphs" list')
        title = article.get("title", "")
        if title:
            where_article += f" (title {title!r})"
        for pi, para in enumerate(article["paragraphs"]):
            where_para = f"{where_article}, paragraphs[{pi}]"
            if not isinstance(para, dict) or not isinstance(para.get("context"), str):
                raise ValueError(f'{where_para}: a paragraph needs a "context" string')
            if not isinstance(para.get("qas"), list):
                raise ValueError(f'{where_para}: a paragraph needs a "qas" list')
            paragraph = Paragraph(para["context"])
            if not paragraph.words and para["qas"]:
                if not skip_invalid:
                    raise ValueError(
                        f"{where_para}: the context has no text (--skip-invalid skips its questions)"
                    )
                skipped += [
                    f"{_where_question(where_para, qi, qa)}: the context has no text"
                    for qi, qa in enumerate(para["qas"])
                ]
                continue
            for qi, qa in enumerate(para["qas"]):
                qid = qa.get("id") if isinstance(qa, dict) else None
                where = _where_question(where_para, qi, qa)
                problem = _check_question(qa, paragraph.context, version_2, spans)
                if problem is None and qid in seen:
                    problem = f"duplicate question id (first at {seen[qid]})"
                if problem is not None:
                    if not skip_invalid:
                        raise ValueError(
                            f"{where}: {problem} (--skip-invalid skips such questions)"
                        )
                    skipped.append(f"{where}: {problem}")
                    continue
                seen[qid] = where
                answers = [
                    {"text": a["text"], "answer_start": a["answer_start"]} for a in qa["answers"]
                ]
                examples.append(
                    SquadExample(
                        qid,
                        qa["question"],
                        paragraph,
                        answers,
                        is_impossible=not answers,
                        title=title,
                    )
                )
    return examples, skipped


def _where_question(where_para: str, qi: int, qa) -> str:
    qid = qa.get("id") if isinstance(qa, dict) else None
    return f"{where_para}, qas[{qi}]" + (f" (id {qid!r})" if qid is not None else "")


def _check_question(qa, context: str, version_2: bool, spans: bool = True) -> str | None:
    """What is wrong with one `qas` entry, or None."""
    if not isinstance(qa, dict):
        return "a question must be an object"
    if not isinstance(qa.get("id"), str) or not qa["id"]:
        return '"id" must be a non-empty string'
    if not isinstance(qa.get("question"), str) or not qa["question"].strip():
        return '"question" must be a non-empty string'
    answers = qa.get("answers")
    if not isinstance(answers, list):
        return '"answers" must be a list'
    # A v2.0 question without the field is unanswerable iff it has no
    # answers, as the official v2.0 script decides.
    impossible = qa.get("is_impossible", version_2 and answers == [])
    if not isinstance(impossible, bool):
        return f'"is_impossible" must be true or false, not {impossible!r}'
    if impossible and not version_2:
        return "unanswerable question (is_impossible) in SQuAD v1.1; use the squad2 task"
    if impossible and answers:
        return f"is_impossible is true but the question has {len(answers)} answer(s)"
    if not answers and not impossible:
        return "no answers" if not version_2 else "no answers but is_impossible is false"
    for k, answer in enumerate(answers):
        if not isinstance(answer, dict):
            return f"answers[{k}] must be an object"
        text, start = answer.get("text"), answer.get("answer_start")
        if not isinstance(text, str) or not text.strip():
            return f'answers[{k}]: "text" must be a non-empty string'
        if not isinstance(start, int) or isinstance(start, bool):
            return f'answers[{k}]: "answer_start" must be an integer, not {start!r}'
        if k > 0 or not spans:
            # Only the first answer's place is read (training's span, as Google's reader);
            # the others are gold texts, scored by text as the official scripts score them.
            continue
        if start < 0 or start + len(text) > len(context):
            return (
                f"answers[{k}]: answer_start {start} is out of range: {text!r} "
                f"({len(text)} characters) does not fit in the context "
                f"({len(context)} characters)"
            )
        found = context[start : start + len(text)]
        if found != text:
            return (
                f"answers[{k}]: mismatch: the context at answer_start {start} reads "
                f"{found!r}, not the answer text {text!r}"
            )
    return None
