"""Unanswerable questions made from SQuAD v1.1, for a SQuAD v2.0-format train set.

There is no SQuAD v2.0 train set offline. SQuAD 2.0's unanswerable questions
were written by crowd workers to look answerable from their own paragraph:
in a sample of 25 of dev-v2.0's 5,945, most are an answerable question of
the same paragraph with one thing changed: an entity swapped ("Who founded the
Office of Western Medicine?" asked as "... of Eastern Medicine?", "Second
Polish Republic" as "Second Warsaw Republic", "toy steam engines" as "toy
chamber engines"), a negation or an antonym added ("refuse to move", "What
is never identical ..."). A question asked of the wrong paragraph is far
easier to reject. Three kinds are built, each from answerable v1.1 questions:

    other-paragraph  the question, asked of another paragraph of the same
                     article holding none of its answers (the original
                     builder; its output is pinned, byte for byte).
    answer-removed   its own paragraph with every sentence that overlaps a
                     gold answer span removed: the question's words stay
                     on topic, the fact it asks for is gone.
    entity-swap      the question with one entity it shares with its
                     paragraph swapped for another of the same kind (a name
                     never written lower-case, an acronym, a month, a number
                     of as many digits) taken from elsewhere in the same
                     article, so it stays on topic, and found nowhere in the
                     paragraph, so the paragraph no longer answers it.

    python -m model.tasks.squad make-v2-train --seed 0 \\
        --negatives other-paragraph,answer-removed,entity-swap --negative-ratio 0.5 \\
        --input ../shared/data/squad/train-v1.1.reconstructed.json \\
        --output runs/squad2-data/train-v2.0.json
    python -m model.tasks.squad negatives-report \\
        --input ../shared/data/squad/train-v1.1.reconstructed.json \\
        --dev ../shared/data/squad/dev-v2.0.reconstructed.json

`negatives_report` measures what each kind looks like without training: how
many it yields, and how much of a question's content words its context holds
(`overlap`), beside the answerable questions and dev-v2.0's real negatives.
"""

from __future__ import annotations

import collections
import functools
import random
import re
import statistics

from model.tasks import squad_metric

NEGATIVE_KINDS = ("other-paragraph", "answer-removed", "entity-swap")
DEFAULT_NEGATIVES = "other-paragraph"
DEFAULT_NEGATIVE_RATIO = 0.5  # a third of the questions unanswerable, as in SQuAD 2.0's train set


# === Which kinds, how many ===


def parse_negatives(spec: str, negative_ratio: float | None = None) -> dict[str, float]:
    """`{kind: ratio}` of a `--negatives` value, in `NEGATIVE_KINDS` order.

    `"a,b"` splits `negative_ratio` (default 0.5) evenly between the kinds;
    `"a=0.3,b=0.2"` gives each its own ratio (then `negative_ratio` must be
    None). A ratio is unanswerable questions of that kind per answerable one.
    """
    if negative_ratio is not None and not negative_ratio >= 0:
        raise ValueError(f"negative_ratio must be >= 0, not {negative_ratio}")
    kinds, explicit = [], {}
    for part in str(spec).split(","):
        kind, has_ratio, ratio = (s.strip() for s in part.partition("="))
        if not kind and not has_ratio:
            continue
        if kind not in NEGATIVE_KINDS:
            raise ValueError(
                f"unknown kind of negatives {kind!r} in {spec!r}: choose from "
                f"{', '.join(NEGATIVE_KINDS)}"
            )
        if kind in kinds:
            raise ValueError(f"{kind!r} is named twice in {spec!r}")
        kinds.append(kind)
        if has_ratio:
            try:
                explicit[kind] = float(ratio)
            except ValueError:
                raise ValueError(f"{part.strip()!r}: the ratio must be a number") from None
            if not explicit[kind] >= 0:
                raise ValueError(f"{part.strip()!r}: the ratio must be >= 0")
    if not kinds:
        raise ValueError(
            f"no kind of negatives in {spec!r}: choose from {', '.join(NEGATIVE_KINDS)}"
        )
    if explicit:
        if len(explicit) != len(kinds):
            raise ValueError(f"{spec!r}: give a ratio to every kind or to none")
        if negative_ratio is not None:
            raise ValueError(
                f"{spec!r} gives each kind its ratio: leave out negative_ratio (--negative-ratio)"
            )
        ratios = explicit
    else:
        total = DEFAULT_NEGATIVE_RATIO if negative_ratio is None else negative_ratio
        ratios = {kind: total / len(kinds) for kind in kinds}
    return {kind: ratios[kind] for kind in NEGATIVE_KINDS if kind in ratios}


def make_v2_train(
    dataset: dict,
    negative_ratio: float | None = None,
    seed: int = 0,
    negatives: str | dict = DEFAULT_NEGATIVES,
) -> dict:
    """A SQuAD v2.0-format training set: every v1.1 question, plus
    unanswerable ones of the kinds in `negatives` (see the module docstring),
    `negative_ratio` (default 0.5) unanswerable per answerable question split
    evenly between the kinds, or the ratio each kind names
    ("answer-removed=0.25,entity-swap=0.25"). Deterministic for a `seed`;
    each kind draws from its own generator, so adding a kind leaves the
    others' questions as they were. The input is not modified.

    other-paragraph (the default): v1.1 questions drawn at random from
    articles with several paragraphs, each asked of another paragraph of the
    same article that contains none of its answers; the ratio counts those
    questions (each at most once per paragraph; a ratio above 1 draws
    questions again), fewer when every other paragraph holds the answer.
    The default ratio of 0.5 makes a third of the questions unanswerable, as
    in the real SQuAD 2.0 train set (43,498 of 130,319).

    answer-removed, entity-swap: the ratio counts all answerable questions;
    questions are drawn at random until that many negatives are made, at
    most one per question, those that yield none skipped.
    """
    return build_v2_train(dataset, negative_ratio, seed, negatives)[0]


def question_ids(articles: list) -> set[str]:
    """The question ids of a SQuAD dataset's articles."""
    return {qa["id"] for a in articles for p in a["paragraphs"] for qa in p["qas"]}


def build_v2_train(
    dataset: dict,
    negative_ratio: float | None = None,
    seed: int = 0,
    negatives: str | dict = DEFAULT_NEGATIVES,
) -> tuple[dict, dict[str, int]]:
    """`make_v2_train`'s dataset and `{kind: negatives made}`."""
    if isinstance(negatives, dict):
        spec = ",".join(f"{kind}={ratio}" for kind, ratio in negatives.items())
        ratios = parse_negatives(spec, negative_ratio)
    else:
        ratios = parse_negatives(negatives, negative_ratio)
    articles = []
    for article in dataset["data"]:
        paragraphs = []
        for para in article["paragraphs"]:
            qas = [
                {
                    "question": qa["question"],
                    "id": qa["id"],
                    "answers": [dict(a) for a in qa["answers"]],
                    "is_impossible": bool(qa.get("is_impossible", False)),
                }
                for qa in para["qas"]
            ]
            paragraphs.append({"context": para["context"], "qas": qas})
        articles.append({"title": article.get("title", ""), "paragraphs": paragraphs})
    # (article, paragraph, question) of every answerable question, before any is added.
    answerable = [
        (ai, pi, qi)
        for ai, article in enumerate(articles)
        for pi, para in enumerate(article["paragraphs"])
        for qi, qa in enumerate(para["qas"])
        if not qa["is_impossible"] and qa["answers"]
    ]
    taken = question_ids(articles)
    sizes = [len(a["paragraphs"]) for a in articles]  # answer-removed appends paragraphs
    made = {}
    for kind, ratio in ratios.items():
        if kind == "other-paragraph":
            # random.Random(seed) and this order of draws: the pinned output.
            rng = random.Random(seed)
            made[kind] = _other_paragraph(articles, answerable, ratio, rng, taken)
        else:
            rng = random.Random(f"{kind}:{seed}")
            wanted = min(round(ratio * len(answerable)), len(answerable))
            if kind == "answer-removed":
                made[kind] = _answer_removed(articles, answerable, wanted, rng, taken)
            else:
                made[kind] = _entity_swap(articles, answerable, wanted, rng, taken, sizes)
    return {"version": "v2.0", "data": articles}, made


def fresh_id(base: str, taken: set) -> str:
    """`base`, or `base-2`, `base-3`, ... : the first id not in `taken` (then added to it)."""
    qid, n = base, 1
    while qid in taken:
        n += 1
        qid = f"{base}-{n}"
    taken.add(qid)
    return qid


def _unanswerable(question: str, qid: str) -> dict:
    return {"question": question, "id": qid, "answers": [], "is_impossible": True}


# === other-paragraph ===


def _other_paragraph(articles, answerable, ratio: float, rng, taken: set) -> int:
    candidates = [(ai, pi, qi) for ai, pi, qi in answerable if len(articles[ai]["paragraphs"]) > 1]
    wanted = round(ratio * len(candidates))
    order = []
    while len(order) < wanted and candidates:  # ratio > 1: every question again, reshuffled
        batch = list(candidates)
        rng.shuffle(batch)
        order.extend(batch[: wanted - len(order)])
    normalized = {}  # (article, paragraph) -> normalised context, for the leak check
    used = set()
    made = 0
    num_paragraphs = {ai: len(articles[ai]["paragraphs"]) for ai, _, _ in candidates}
    for ai, pi, qi in order:
        qa = articles[ai]["paragraphs"][pi]["qas"][qi]
        answers = {squad_metric.normalize_answer(a["text"]) for a in qa["answers"]}
        others = [j for j in range(num_paragraphs[ai]) if j != pi and (ai, j, qa["id"]) not in used]
        rng.shuffle(others)
        for j in others:
            if (ai, j) not in normalized:
                normalized[ai, j] = (
                    " "
                    + squad_metric.normalize_answer(articles[ai]["paragraphs"][j]["context"])
                    + " "
                )
            # Leave out paragraphs where the answer appears: there the question
            # might well be answerable.
            if any(f" {a} " in normalized[ai, j] for a in answers if a):
                continue
            used.add((ai, j, qa["id"]))
            qid = fresh_id(f"{qa['id']}-unanswerable-p{j}", taken)
            articles[ai]["paragraphs"][j]["qas"].append(_unanswerable(qa["question"], qid))
            made += 1
            break
    return made


# === answer-removed ===

# A word ending a sentence: ., ! or ? and perhaps closing quotes or brackets.
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*$")
# Words that end in "." without ending a sentence (lower-cased, final "." dropped).
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr mt ft no nos vs etc co corp inc ltd gen col lt sgt capt rev "
    "gov sen rep pres ca approx fig vol op jan feb mar apr aug sept sep oct nov dec".split()
)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) character spans of the sentences of `text`, split simply:
    after a word ending in ".", "!" or "?" (closing quotes or brackets
    allowed) when the next word does not start lower-case, unless the word is
    an abbreviation: one letter ("J."), dotted ("U.S.", "e.g.") or a common
    one ("Dr.", "St.", "Inc."). A missed boundary only makes a sentence
    longer, which removes more text, never less."""
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    spans, first = [], 0
    for k, (start, end) in enumerate(words):
        last = k == len(words) - 1
        if not last:
            word = text[start:end]
            following = text[words[k + 1][0]]
            if not _SENTENCE_END.search(word) or following.islower():
                continue
            core = re.sub(r"[\"'”’)\]]*$", "", word)[:-1].lstrip("\"'“‘([")
            if (len(core) == 1 and core.isalpha()) or "." in core or core.lower() in _ABBREVIATIONS:
                continue
        spans.append((words[first][0], end))
        first = k + 1
    return spans


def _leaks(context: str, answers: list) -> bool:
    """Whether a gold answer text is still in `context` (case-insensitive, or
    as the metric normalises it)."""
    lower = context.lower()
    normalized = " " + squad_metric.normalize_answer(context) + " "
    for a in answers:
        if a["text"].lower() in lower:
            return True
        text = squad_metric.normalize_answer(a["text"])
        if text and f" {text} " in normalized:
            return True
    return False


def remove_answer_sentences(context: str, answers: list) -> str | None:
    """`context` without the sentences that overlap any answer span (the
    rest joined with single spaces); None when nothing is left, or when an
    answer's text is still there (said twice in the paragraph, or a sentence
    split missed)."""
    spans = sentence_spans(context)
    hit = [
        any(s < a["answer_start"] + len(a["text"]) and a["answer_start"] < e for a in answers)
        for s, e in spans
    ]
    kept = [context[s:e] for (s, e), h in zip(spans, hit) if not h]
    if not kept or not any(hit):
        return None
    reduced = " ".join(kept)
    return None if _leaks(reduced, answers) else reduced


def _answer_removed(articles, answerable, wanted: int, rng, taken: set) -> int:
    order = list(answerable)
    rng.shuffle(order)
    added = {}  # (article, paragraph, reduced context) -> the new paragraph
    made = 0
    for ai, pi, qi in order:
        if made >= wanted:
            break
        para = articles[ai]["paragraphs"][pi]
        qa = para["qas"][qi]
        reduced = remove_answer_sentences(para["context"], qa["answers"])
        if reduced is None:
            continue
        entry = _unanswerable(qa["question"], fresh_id(f"{qa['id']}-unanswerable-removed", taken))
        key = (ai, pi, reduced)
        if key not in added:  # questions on the same sentence share the paragraph
            added[key] = {"context": reduced, "qas": []}
            articles[ai]["paragraphs"].append(added[key])
        added[key]["qas"].append(entry)
        made += 1
    return made


# === entity-swap ===

_MONTHS = frozenset(
    "January February March April May June July August September October November December".split()
)
# Capitalised words that are not entities (question words, sentence openers).
_NOT_ENTITIES = frozenset(
    "The What Which Who Whom Whose When Where Why How Was Were Did Does Do Is Are In On At Of For "
    "To By From With As And But Or If It Its This That These Those There Their They He She His Her "
    "We Our You Your After Before During Since While Although However Also Many Most Some".split()
)
_NAME = re.compile(r"[A-Z][a-z]{2,}(?:-[A-Z][a-z]+)*")
_ACRONYM = re.compile(r"[A-Z]{2,}")
_ROMAN = re.compile(r"[IVXLCDM]+")
_NUMBER = re.compile(r"[0-9]{1,4}")
_OPENING = "\"'“‘(["
_CLOSING = "\"'”’)].,;:!?"


def common_words(texts) -> set[str]:
    """The words of `texts` that are written in lower case somewhere: a
    capitalised word among them ("Hotel", "Conflict") is a common noun that
    opens a title, not a name."""
    words = set()
    for text in texts:
        words.update(w for w in re.findall(r"\w+", text) if w.islower())
    return words


def entity_kind(word: str, common: set | frozenset = frozenset()) -> str | None:
    """The kind of an entity-like word, or None: "month", "name"
    (capitalised, 3 letters or more, not in `common` in lower case),
    "acronym" (2 capitals or more, not a Roman numeral) or "number:N" (N
    digits, at most 4: years with years)."""
    if word in _MONTHS:
        return "month"
    if _NAME.fullmatch(word):
        return "name" if word not in _NOT_ENTITIES and word.lower() not in common else None
    if _ACRONYM.fullmatch(word) and not _ROMAN.fullmatch(word):  # "World War II": not an entity
        return "acronym"
    if _NUMBER.fullmatch(word):
        return f"number:{len(word)}"
    return None


def _core(text: str, start: int, end: int) -> tuple[int, int]:
    """The span of a whitespace-separated word without its surrounding
    punctuation and possessive "'s"."""
    while start < end and text[start] in _OPENING:
        start += 1
    while end > start and text[end - 1] in _CLOSING:
        end -= 1
    if text[start:end].endswith(("'s", "’s")):
        end -= 2
    return start, end


def _entities(
    text: str, skip_sentence_starts: bool, common: set | frozenset = frozenset()
) -> list[tuple[int, int, str, str]]:
    """(start, end, word, kind) of the entity-like words of `text`. A name
    next to another capitalised word ("Martin Luther", "Atlantic City") is a
    "name-part", swapped only with other parts, a lone one stays a "name"
    (Poland, Yale). With `skip_sentence_starts`, a word opening a sentence
    (capitalised anyway) is left out."""
    words = []  # (start, end, word, joined to the next word by a space only, opens a sentence)
    opens = True
    for m in re.finditer(r"\S+", text):
        start, end = _core(text, m.start(), m.end())
        words.append((start, end, text[start:end], end == m.end(), opens))
        opens = bool(_SENTENCE_END.search(m.group()))
    capitalised = [w[:1].isupper() and w not in _NOT_ENTITIES and not o for *_, w, _, o in words]
    out = []
    for k, (start, end, word, joined, opens) in enumerate(words):
        kind = entity_kind(word, common) if start < end else None
        if kind is None or (skip_sentence_starts and opens):
            continue
        if kind == "name" and (
            (k > 0 and words[k - 1][3] and capitalised[k - 1])
            or (joined and k + 1 < len(words) and capitalised[k + 1])
        ):
            kind = "name-part"
        out.append((start, end, word, kind))
    return out


@functools.lru_cache(maxsize=1024)
def _words(text: str) -> frozenset:
    """The words of `text` without their surrounding punctuation."""
    return frozenset(text[slice(*_core(text, *m.span()))] for m in re.finditer(r"\S+", text))


def swap_entity(
    question: str,
    context: str,
    pool: dict[str, list[str]],
    rng,
    common: set | frozenset = frozenset(),
) -> str | None:
    """`question` with one of its entity-like words that the paragraph also
    has (the words that tie the question to the paragraph) replaced by a
    word of the same kind from `pool` that is not in `context` nor in the
    question (case-insensitive, as a substring: not even inside a longer
    word); None when no such pair exists. The question's first word is
    never swapped (it is capitalised anyway)."""
    context_words = _words(context)
    context_lower, question_lower = context.lower(), question.lower()
    slots = [s for s in _entities(question, True, common) if s[2] in context_words]
    rng.shuffle(slots)
    for start, end, _, kind in slots:
        words = pool.get(kind, ())
        fits = lambda w: w.lower() not in context_lower and w.lower() not in question_lower
        choice = None
        for _ in range(20):  # a few random tries first: the pool holds hundreds of words
            if not words:
                break
            word = words[rng.randrange(len(words))]
            if fits(word):
                choice = word
                break
        else:
            fitting = [w for w in words if fits(w)]
            choice = rng.choice(fitting) if fitting else None
        if choice is not None:
            return question[:start] + choice + question[end:]
    return None


def entity_pool(contexts, common: set | frozenset = frozenset()) -> dict[str, list[str]]:
    """`{kind: [words]}` of the entity-like words of `contexts` (not those
    opening a sentence), each once, in order of appearance (deterministic)."""
    pool: dict[str, dict[str, None]] = {}
    for context in contexts:
        for _, _, word, kind in _entities(context, True, common):
            pool.setdefault(kind, {})[word] = None
    return {kind: list(words) for kind, words in pool.items()}


def _entity_swap(articles, answerable, wanted: int, rng, taken: set, sizes: list) -> int:
    # The input's paragraphs and questions only (not other kinds' additions),
    # so that adding a kind leaves this one's draws as they were.
    originals = collections.defaultdict(set)
    for ai, pi, qi in answerable:
        originals[ai, pi].add(articles[ai]["paragraphs"][pi]["qas"][qi]["question"])
    common = common_words(
        text
        for ai, article in enumerate(articles)
        for para in article["paragraphs"][: sizes[ai]]
        for text in (para["context"], *(q["question"] for q in para["qas"]))
    )
    order = list(answerable)
    rng.shuffle(order)
    pools = {}
    made = 0
    for ai, pi, qi in order:
        if made >= wanted:
            break
        if ai not in pools:  # the article's own words keep the question on topic
            contexts = (p["context"] for p in articles[ai]["paragraphs"][: sizes[ai]])
            pools[ai] = entity_pool(contexts, common)
        para = articles[ai]["paragraphs"][pi]
        qa = para["qas"][qi]
        question = swap_entity(qa["question"], para["context"], pools[ai], rng, common)
        if question is None or question in originals[ai, pi]:
            continue
        para["qas"].append(
            _unanswerable(question, fresh_id(f"{qa['id']}-unanswerable-swap", taken))
        )
        made += 1
    return made


# === How each kind looks ===

# Function words, left out of a question's content words.
_STOPWORDS = frozenset(
    """a an the of in on at to for from by with as and or but not no nor is are was were be been
    being am do does did done has have had having what which who whom whose when where why how
    that this these those there their them they it its he she his her him we our us you your i
    me my can could will would shall should may might must than then so such if into onto about
    over under after before during since while also other another some any many much more most
    one s""".split()
)


def content_words(text: str) -> set[str]:
    """Lower-cased word tokens of `text`, function words left out."""
    return {w for w in re.findall(r"\w+", text.lower()) if w not in _STOPWORDS}


@functools.lru_cache(maxsize=4096)
def _context_words(context: str) -> tuple[frozenset, tuple[frozenset, ...]]:
    sentences = tuple(frozenset(content_words(context[s:e])) for s, e in sentence_spans(context))
    return frozenset(content_words(context)), sentences


def overlap(question: str, context: str) -> tuple[float, float] | None:
    """(share of the question's content words found in `context`, the
    largest such share in one sentence of it); None when the question has
    no content word."""
    words = content_words(question)
    if not words:
        return None
    whole, sentences = _context_words(context)
    best = max((len(words & s) for s in sentences), default=0)
    return len(words & whole) / len(words), best / len(words)


def _summary(pairs) -> dict:
    """Statistics of the overlaps of (question, context) pairs."""
    scores = [s for s in (overlap(q, c) for q, c in pairs) if s is not None]
    if not scores:
        return {"questions": 0}
    context = [s[0] for s in scores]
    sentence = [s[1] for s in scores]
    return {
        "questions": len(scores),
        "overlap_mean": round(100 * statistics.fmean(context), 1),
        "overlap_below_half": round(100 * sum(s < 0.5 for s in context) / len(scores), 1),
        "sentence_overlap_mean": round(100 * statistics.fmean(sentence), 1),
    }


def _pairs(dataset: dict, impossible: bool):
    for article in dataset["data"]:
        for para in article["paragraphs"]:
            for qa in para["qas"]:
                if bool(qa.get("is_impossible", not qa["answers"])) == impossible:
                    yield qa["question"], para["context"]


def negatives_report(train: dict, dev: dict | None = None, seed: int = 0) -> dict:
    """How each kind of negative looks, without training: each kind made
    alone at ratio 1 (as many as the train set yields: `made` of
    `answerable`), and for its questions, the answerable train questions and
    (with `dev`) dev-v2.0's answerable and real unanswerable questions:
    `overlap_mean`, the mean share (%) of a question's content words found
    in its context, `overlap_below_half`, the share (%) of questions with
    less than half found (easy to reject on the words alone), and
    `sentence_overlap_mean`, the same share in the context's best sentence.
    """
    rows = {"train answerable": _summary(_pairs(train, impossible=False))}
    answerable = sum(1 for _ in _pairs(train, impossible=False))
    for kind in NEGATIVE_KINDS:
        made, counts = build_v2_train(train, seed=seed, negatives={kind: 1.0})
        rows[kind] = {
            "made": counts[kind],
            "answerable": answerable,
            **_summary(_pairs(made, impossible=True)),
        }
    if dev is not None:
        rows["dev-v2.0 answerable"] = _summary(_pairs(dev, impossible=False))
        rows["dev-v2.0 unanswerable"] = _summary(_pairs(dev, impossible=True))
    return rows


def report_table(rows: dict) -> str:
    """`negatives_report`'s rows as a Markdown table."""
    lines = [
        "| questions | made (of answerable) | overlap with the context | under half found "
        "| overlap with the best sentence |",
        "|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        made = (
            f"{row['made']:,} ({100 * row['made'] / max(row['answerable'], 1):.1f} %)"
            if "made" in row
            else f"{row['questions']:,}"
        )
        lines.append(
            f"| {name} | {made} | {row.get('overlap_mean', '-')} % "
            f"| {row.get('overlap_below_half', '-')} % | {row.get('sentence_overlap_mean', '-')} % |"
        )
    return "\n".join(lines)
