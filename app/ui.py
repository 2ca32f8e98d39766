"""The app's layout and event wiring: one gr.Blocks with five tabs, nothing run at import.

`build(slots, limits)` returns the Blocks; `python -m app` launches it with `CSS`. Every view's
prediction is a named API endpoint (`fill_mask`, `attention`, `sentiment`, `answer`,
`entities`); the attention view's re-render events (another layer, head or token) are private.
A sixth tab, Replaced tokens (endpoints `replaced_tokens` and `corrupt`), is built only when
`slots` has a model for it (an ELECTRA bundle, `app.models.OPTIONAL_VIEWS`).
What the views compute lives in `app.predict`; this file only places components and connects
them.

    python -m app --help
"""

from app import predict
from app.models import VIEW

TITLE = "BERT on the edge"

LONG_REVIEW = (
    "The first hour is a delight: the cast is warm and funny, the dialogue sparkles, and the "
    "city has never looked lovelier on screen. Then the plot takes over. A kidnapping subplot "
    "drags on for forty minutes, the villain is a cardboard cutout, and the ending is so "
    "muddled that the audience around me laughed in all the wrong places. Stay for the first "
    "act and leave before the second."
)

EXAMPLES = {
    "fill_mask": [
        ["The capital of France is [MASK]."],
        ["The man went to the [MASK] to buy a gallon of [MASK]."],
        ["She played the [MASK] beautifully at the concert."],
    ],
    "attention": [
        ["The cat sat on the mat.", ""],
        ["The animal didn't cross the street because it was too tired.", ""],
        ["Where is the cat?", "The cat sat on the mat."],
    ],
    "sentiment": [
        ["A gripping, beautifully acted film."],
        ["The plot is thin and the jokes fall flat."],
        ["An uneven but often charming debut."],
        # Longer than the default model's 64 tokens: read in windows, as the status says.
        [LONG_REVIEW],
    ],
    "answer": [
        [
            "Which team won Super Bowl 50?",
            "Super Bowl 50 was an American football game to determine the champion of the "
            "National Football League (NFL) for the 2015 season. The American Football "
            "Conference (AFC) champion Denver Broncos defeated the National Football "
            "Conference (NFC) champion Carolina Panthers 24–10 to earn their third Super "
            "Bowl title.",
        ],
        [
            "Where was the game played?",
            "The game was played on February 7, 2016, at Levi's Stadium in the San Francisco "
            "Bay Area at Santa Clara, California.",
        ],
        [
            "Who wrote the novel?",
            "The game was played on February 7, 2016, at Levi's Stadium in Santa Clara.",
        ],
    ],
    "entities": [
        ["George Washington went to Washington to meet officials of the United Nations."],
        ["Angela Merkel visited the BMW plant in Munich on Tuesday."],
        ["EU rejects German call to boycott British lamb."],
    ],
    "replaced_tokens": [
        ["The chef ate the meal."],  # the ELECTRA paper's example: "cooked" replaced
        ["The cat sat on the mat."],
        ["Paris is the capital of Germany."],
    ],
}

# Heatmap cell shades q0 (white) .. q20 (deep blue), see render.heatmap_html.
_SHADES = "\n".join(
    f".attn td.q{q} {{ background: rgb({255 - round(q / 20 * 226)}, {255 - round(q / 20 * 177)}, "
    f"{255 - round(q / 20 * 39)}); }}"
    for q in range(21)
)

CSS = (
    """
.bert-bars { display: flex; flex-wrap: wrap; gap: 12px; }
.mask-card { min-width: 220px; padding: 8px 10px; border: 1px solid var(--border-color-primary);
             border-radius: 8px; }
.mask-title { font-weight: 600; margin-bottom: 6px; }
.bar-row { display: grid; grid-template-columns: 7em 1fr 4em; align-items: center; gap: 6px;
           font-size: 0.9em; }
.bar-token { font-family: var(--font-mono); overflow: hidden; text-overflow: ellipsis; }
.bar { background: var(--background-fill-secondary); height: 0.9em; border-radius: 3px; }
.bar-fill { display: block; height: 100%; background: #2563eb; border-radius: 3px; }
.bar-value { text-align: right; font-variant-numeric: tabular-nums; }
.attn-wrap { overflow: auto; max-height: 640px; }
.attn { border-collapse: collapse; font-family: var(--font-mono); font-size: 11px; }
.attn caption { text-align: left; font-family: var(--font); font-size: 13px; padding: 4px 0; }
.attn td { width: 14px; height: 14px; min-width: 14px; padding: 0; border: 1px solid #fff; }
.attn th { font-weight: normal; padding: 0 4px; cursor: pointer; white-space: nowrap; }
.attn th.col span { writing-mode: vertical-rl; transform: rotate(180deg); }
.attn th.row { text-align: right; }
.attn th.special { font-weight: 700; }
.attn th.seg1 { color: #92400e; }
.attn tr.sel th.row { background: #fde68a; }
.attn tr.sel td { border-top-color: #f59e0b; border-bottom-color: #f59e0b; }
.heads-grid { display: flex; flex-wrap: wrap; gap: 8px; }
.heads-grid figure { margin: 0; cursor: pointer; text-align: center; font-size: 12px; }
.heads-grid img { width: 96px; height: 96px; image-rendering: pixelated;
                  border: 2px solid transparent; }
.heads-grid figure.sel img { border-color: #b45309; }
/* A keyboard user sees where the focus is (Gradio's own ring is faint or, on sliders, none). */
:focus-visible, input[type="range"]:focus-visible { outline: 3px solid #1d4ed8;
                                                   outline-offset: 2px; }
"""
    + _SHADES
)

# Clicks inside the heatmaps and the grid become events carrying the token or head clicked.
_CLICK_TOKEN = (
    "element.addEventListener('click', (e) => { const t = e.target.closest("
    "'[data-token]'); if (t) trigger('click', {token: Number(t.dataset.token)}); });"
)
_CLICK_HEAD = (
    "element.addEventListener('click', (e) => { const f = e.target.closest("
    "'[data-head]'); if (f) trigger('click', {head: Number(f.dataset.head)}); });"
)


# Pixels below which the two attention maps stop sharing a row (their captions need it).
MAP_MIN_WIDTH = 320

# A box of several lines takes Enter as a new line; Shift+Enter runs the view.
SUBMIT_HINT = "Shift+Enter runs it"

# Run on page load, and again whenever Gradio draws more of the page (a tab's first visit):
# - each status message becomes a live region, so that screen readers announce it (Gradio's
#   Markdown is none): its text element, which Gradio keeps from one answer to the next, not
#   the block around it, which also holds Gradio's running timer;
# - the Seed box starts empty, as its label says ("a new one each time"): Gradio's Number
#   shows and sends 0 for a value of None; emptied, it sends None. Done once, when the box
#   first shows a value, so a 0 the user types stays;
# - keyboard use as WAI-ARIA's patterns have it, which Gradio's tabs and radios lack: the tabs
#   are one Tab stop (the selected tab's), arrow keys, Home and End choose another; each radio
#   group's options share a name (Gradio gives each option its own), so that the group is one
#   Tab stop and the arrow keys move its choice, which Gradio sees as a click.
JS = """() => {
  const step = {ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1};
  document.addEventListener('keydown', (event) => {
    const tab = event.target.closest && event.target.closest('[role="tablist"] [role="tab"]');
    if (!tab) return;
    const tabs = [...tab.parentElement.querySelectorAll('[role="tab"]:not([disabled])')];
    const k = tabs.indexOf(tab), n = tabs.length;
    const next = event.key in step ? tabs[(k + step[event.key] + n) % n]
      : {Home: tabs[0], End: tabs[n - 1]}[event.key];
    if (!next) return;
    event.preventDefault();
    next.click();
    next.focus();
  });
  const mark = () => {
    document.querySelectorAll('[role="tablist"] [role="tab"]').forEach((t) => {
      t.tabIndex = t.getAttribute('aria-selected') === 'true' ? 0 : -1;
    });
    document.querySelectorAll('.block input[type="radio"]').forEach((r) => {
      const block = r.closest('.block');
      block.dataset.radios = block.dataset.radios || 'radios-' + Math.random().toString(36).slice(2);
      r.name = block.dataset.radios;
    });
    const texts = '[id$="-status"] [data-testid="markdown"]:not([aria-live])';
    document.querySelectorAll(texts).forEach((e) => {
      e.setAttribute('role', 'status');
      e.setAttribute('aria-live', 'polite');
    });
    const seed = document.querySelector('#replaced_tokens-seed input:not([data-emptied])');
    if (seed && seed.value !== '') {
      seed.dataset.emptied = '1';
      if (seed.value === '0') {
        seed.value = '';
        seed.dispatchEvent(new Event('input', {bubbles: true}));
      }
    }
  };
  mark();
  new MutationObserver(mark).observe(document.body, {
    childList: true, subtree: true, attributes: true, attributeFilter: ['aria-selected'],
  });
}"""

# All events share one queue, so `queue(default_concurrency_limit=N)` (--concurrency) bounds the
# jobs running at once across the views, not per event.
SHARED = {"concurrency_id": "models"}


def theme():
    """Gradio's default theme with the machine's own fonts (its web fonts, Source Sans Pro and
    IBM Plex Mono, come from Google's servers, and offline the browser pieced the title
    together from two fonts: "ʙERT", a small B; the A of "ANSWER" too) and darker accents."""
    import gradio as gr

    return gr.themes.Default(
        font=("ui-sans-serif", "system-ui", "sans-serif"),
        font_mono=("ui-monospace", "Consolas", "monospace"),
    ).set(
        # Text at least 4.5:1 against its background (WCAG AA): white on orange 700 rather
        # than 500 (3.6:1), the selected tab and small grey text darker than Gradio's.
        button_primary_background_fill="*primary_700",
        button_primary_background_fill_hover="*primary_800",
        color_accent="*primary_700",
        body_text_color_subdued="*neutral_600",
    )


def build(slots: dict, limits: predict.Limits = predict.Limits()):
    """The Blocks of the five views over `slots` ({view key: models.Slot}), and of each
    optional view that has a slot."""
    import gradio as gr

    with gr.Blocks(title=TITLE, analytics_enabled=False) as demo:
        gr.Markdown(
            f"# {TITLE}\nBERT models answering on this machine's CPU "
            f"(input up to {limits.max_chars:,} characters a box)."
        )
        with gr.Tabs():
            with gr.Tab(VIEW["fill_mask"].title, id="fill_mask"):
                _fill_mask_view(gr, slots["fill_mask"], limits)
            with gr.Tab(VIEW["attention"].title, id="attention"):
                _attention_view(gr, slots["attention"], limits)
            with gr.Tab(VIEW["sentiment"].title, id="sentiment"):
                _sentiment_view(gr, slots["sentiment"], limits)
            with gr.Tab(VIEW["answer"].title, id="answer"):
                _answer_view(gr, slots["answer"], limits)
            with gr.Tab(VIEW["entities"].title, id="entities"):
                _entities_view(gr, slots["entities"], limits)
            if "replaced_tokens" in slots:  # only with an ELECTRA model: app.models
                with gr.Tab(VIEW["replaced_tokens"].title, id="replaced_tokens"):
                    _replaced_tokens_view(gr, slots["replaced_tokens"], limits)
    return demo


def _header(gr, slot):
    gr.Markdown(slot.describe(), elem_classes=["model-info"])


def _raw(gr):
    with gr.Accordion("Raw output (JSON)", open=False):
        return gr.JSON(label="raw", show_label=False)


def _outputs(result: dict, view: str, extra: tuple = ()) -> tuple:
    return tuple(result[name] for name in predict.OUTPUTS[view] + extra)


def _text_with_example(gr, example: str, **kwargs):
    """A Textbox whose example in the API's schema (`view_api()`, the API page) is `example`:
    Gradio's own, "Hello!!", is no valid input where a [MASK] is needed. (Set on the
    instance: a subclass of a Gradio component makes Gradio write a .pyi stub beside this
    file.)"""
    box = gr.Textbox(**kwargs)
    box.example_payload = box.example_value = lambda: example
    return box


def _fill_mask_view(gr, slot, limits):
    _header(gr, slot)
    text = _text_with_example(
        gr,
        "The cat sat on the [MASK].",
        label="Text with one or more [MASK]",
        lines=2,
        info=SUBMIT_HINT,
        elem_id="fill_mask-text",
    )
    # A bundle stores only its top_k predictions per mask.
    most = min(limits.max_top_k, (slot.info or {}).get("top_k") or limits.max_top_k)
    with gr.Row():
        top_k = gr.Slider(1, most, value=min(5, most), step=1, label="Predictions per [MASK]")
        button = gr.Button("Fill the masks", variant="primary", elem_id="fill_mask-run")
    status = gr.Markdown(label="status", show_label=False, elem_id="fill_mask-status")
    filled = gr.HighlightedText(label="Filled with the best guesses", elem_id="fill_mask-filled")
    bars = gr.HTML(label="bars", show_label=False, elem_id="fill_mask-bars")
    raw = _raw(gr)
    gr.Examples(EXAMPLES["fill_mask"], inputs=[text], cache_examples=False)

    def run(text, top_k):
        return _outputs(predict.fill_mask(slot, text, top_k, limits), "fill_mask")

    gr.on(
        [button.click, text.submit],
        run,
        [text, top_k],
        [status, filled, bars, raw],
        api_name="fill_mask",
        **SHARED,
    )


def _attention_view(gr, slot, limits):
    _header(gr, slot)
    text, pair, button, layer, head, token = _attention_controls(gr, slot)
    status, attends_to, head_map, average_map, grid = _attention_maps(gr)
    raw = _raw(gr)
    state = gr.State(None, time_to_live=60 * limits.state_minutes)  # a visitor's maps, bounded
    gr.Examples(EXAMPLES["attention"], inputs=[text, pair], cache_examples=False)
    views = [status, attends_to, head_map, average_map, grid, raw]

    def run(text, pair, layer, head, token):
        result = predict.attention(slot, text, pair, layer, head, token, limits)
        return _outputs(result, "attention", ("state",))

    def choices(st, raw):
        if not st:
            return gr.Dropdown(choices=[], value=None)
        return gr.Dropdown(choices=predict.token_choices(st["tokens"]), value=raw.get("token"))

    def rerender(st, layer, head, token):
        return _outputs(predict.rerender_attention(st, layer, head, token), "attention")

    def choose_token(st, layer, head, evt: gr.EventData):
        index = _event_value(evt, "token", "index")
        return (index,) + rerender(st, layer, head, index)

    def choose_head(st, layer, token, evt: gr.EventData):
        h = _event_value(evt, "head")
        return (None if h is None else str(h),) + rerender(st, layer, h, token)

    gr.on(
        [button.click, text.submit, pair.submit],
        run,
        [text, pair, layer, head, token],
        views + [state],
        api_name="attention",
        **SHARED,
    ).then(choices, [state, raw], [token], api_visibility="private", **SHARED)
    gr.on(
        [layer.input, head.input, token.input],
        rerender,
        [state, layer, head, token],
        views,
        api_visibility="private",
        **SHARED,
    )
    attends_to.select(
        choose_token, [state, layer, head], [token] + views, api_visibility="private", **SHARED
    )
    for heatmap in (head_map, average_map):
        heatmap.click(
            choose_token, [state, layer, head], [token] + views, api_visibility="private", **SHARED
        )
    grid.click(
        choose_head, [state, layer, token], [head] + views, api_visibility="private", **SHARED
    )


def _attention_controls(gr, slot) -> tuple:
    """The sentence boxes, the button and the layer/head/token choosers."""
    layers, heads = slot.layers_heads or (1, 1)
    with gr.Row():
        text = gr.Textbox(label="Sentence", lines=2, info=SUBMIT_HINT, elem_id="attention-text")
        pair = gr.Textbox(
            label="Second sentence (optional; shown after [SEP])",
            lines=2,
            info=SUBMIT_HINT,
            elem_id="attention-pair",
        )
    button = gr.Button("Show attention", variant="primary", elem_id="attention-run")
    with gr.Row():
        # String values: Gradio's API schema advertises a Radio's choices as strings
        # (Literal['1', '2', ...]) and refuses any other type.
        layer = gr.Radio(
            [str(i) for i in range(1, layers + 1)],
            value="1",
            label="Layer",
            elem_id="attention-layer",
        )
        head = gr.Radio(
            [str(i) for i in range(1, heads + 1)], value="1", label="Head", elem_id="attention-head"
        )
        token = gr.Dropdown(
            choices=[],
            value=None,
            label="Attending token",
            allow_custom_value=True,
            elem_id="attention-token",
        )
    return text, pair, button, layer, head, token


def _attention_maps(gr) -> tuple:
    """Where the attention shows: status, the token's row, two maps, the heads' grid."""
    status = gr.Markdown(label="status", show_label=False, elem_id="attention-status")
    attends_to = gr.HighlightedText(
        label="What the chosen token attends to (click a token to choose it)",
        show_legend=False,
        elem_id="attention-attends",
    )
    maps = []
    with gr.Row():  # side by side; one above the other on a narrow screen
        for name in ("head", "average"):
            with gr.Column(min_width=MAP_MIN_WIDTH):
                maps.append(
                    gr.HTML(
                        label=f"{name} map",
                        show_label=False,
                        elem_id=f"attention-{name}-map",
                        js_on_load=_CLICK_TOKEN,
                    )
                )
    head_map, average_map = maps
    gr.Markdown("All heads of the layer (click one to show it above):")
    grid = gr.HTML(
        label="all heads", show_label=False, elem_id="attention-grid", js_on_load=_CLICK_HEAD
    )
    return status, attends_to, head_map, average_map, grid


def _event_value(evt, *names):
    """The first of `names` in an event's data (an HTML `trigger` payload, or SelectData's)."""
    data = getattr(evt, "_data", None)
    data = data if isinstance(data, dict) else {}
    return next((data[n] for n in names if data.get(n) is not None), None)


def _sentiment_view(gr, slot, limits):
    _header(gr, slot)
    text = gr.Textbox(
        label="Text",
        lines=3,
        info=SUBMIT_HINT,
        placeholder="A sentence or a whole review: a long text is read in windows.",
        elem_id="sentiment-text",
    )
    button = gr.Button("Classify", variant="primary", elem_id="sentiment-run")
    status = gr.Markdown(label="status", show_label=False, elem_id="sentiment-status")
    label = gr.Label(label="Confidence", elem_id="sentiment-label")
    raw = _raw(gr)
    gr.Examples(EXAMPLES["sentiment"], inputs=[text], cache_examples=False)

    def run(text):
        return _outputs(predict.sentiment(slot, text, limits), "sentiment")

    gr.on(
        [button.click, text.submit],
        run,
        [text],
        [status, label, raw],
        api_name="sentiment",
        **SHARED,
    )


def _answer_view(gr, slot, limits):
    _header(gr, slot)
    question = gr.Textbox(label="Question", elem_id="answer-question")
    context = gr.Textbox(label="Context", lines=6, info=SUBMIT_HINT, elem_id="answer-context")
    with gr.Row():
        n_best = gr.Slider(
            1,
            limits.max_n_best,
            value=min(5, limits.max_n_best),
            step=1,
            label="Answers in the n-best list",
        )
        button = gr.Button("Answer", variant="primary", elem_id="answer-run")
    status = gr.Markdown(label="status", show_label=False, elem_id="answer-status")
    spans = gr.HighlightedText(
        label="The answer in its context",
        color_map={"answer": predict.ANSWER_COLOR},
        elem_id="answer-context-view",
    )
    nbest = gr.Dataframe(
        headers=["rank", "answer", "start + end logit", "probability"],
        datatype=["number", "str", "number", "number"],
        interactive=False,
        label="n-best",
        elem_id="answer-nbest",
    )
    raw = _raw(gr)
    gr.Examples(EXAMPLES["answer"], inputs=[question, context], cache_examples=False)

    def run(question, context, n_best):
        return _outputs(predict.answer(slot, question, context, n_best, limits), "answer")

    gr.on(
        [button.click, question.submit, context.submit],
        run,
        [question, context, n_best],
        [status, spans, nbest, raw],
        api_name="answer",
        **SHARED,
    )


def _entities_view(gr, slot, limits):
    _header(gr, slot)
    text = gr.Textbox(label="Text", lines=3, info=SUBMIT_HINT, elem_id="entities-text")
    button = gr.Button("Find entities", variant="primary", elem_id="entities-run")
    status = gr.Markdown(label="status", show_label=False, elem_id="entities-status")
    spans = gr.HighlightedText(
        label="Entities",
        color_map=predict.ENTITY_COLORS,
        show_legend=False,  # each span's type beside it, not in a legend of colours alone
        elem_id="entities-spans",
    )
    table = gr.Dataframe(
        headers=["entity", "type", "confidence", "start", "end"],
        datatype=["str", "str", "number", "number", "number"],
        interactive=False,
        label="Entities with confidences",
        elem_id="entities-table",
    )
    with gr.Accordion("Word-level tags", open=False):
        words = gr.Dataframe(
            headers=["word", "tag", "confidence"],
            datatype=["str", "str", "number"],
            interactive=False,
            label="word tags",
            show_label=False,
            elem_id="entities-words",
        )
    raw = _raw(gr)
    gr.Examples(EXAMPLES["entities"], inputs=[text], cache_examples=False)

    def run(text):
        return _outputs(predict.entities(slot, text, limits), "entities")

    gr.on(
        [button.click, text.submit],
        run,
        [text],
        [status, spans, table, words, raw],
        api_name="entities",
        **SHARED,
    )


def _replaced_tokens_view(gr, slot, limits):
    _header(gr, slot)
    text = gr.Textbox(
        label="Sentence (edit a word, or let the generator replace some)",
        lines=2,
        info=SUBMIT_HINT,
        elem_id="replaced_tokens-text",
    )
    button = gr.Button("Find replaced tokens", variant="primary", elem_id="replaced_tokens-run")
    # The generator's controls, shown when the bundle has one (an ELECTRA pre-training run's).
    with gr.Row(visible="corrupt" in (getattr(slot.model, "methods", None) or ())):
        rate = gr.Slider(
            predict.MIN_RATE,
            predict.MAX_RATE,
            value=predict.CORRUPT_RATE,
            step=0.05,
            label="Share of WordPieces the generator draws at (pre-training: 0.15)",
            elem_id="replaced_tokens-rate",
        )
        seed = gr.Number(
            value=None,
            precision=0,
            label="Seed (empty: a new one each time)",
            minimum=0,
            elem_id="replaced_tokens-seed",
        )
        corrupt = gr.Button("Let the generator corrupt it", elem_id="replaced_tokens-corrupt")
    status = gr.Markdown(label="status", show_label=False, elem_id="replaced_tokens-status")
    spans = gr.HighlightedText(
        label="Tokens the discriminator calls replaced",
        color_map=predict.REPLACED_COLORS,
        show_legend=False,
        elem_id="replaced_tokens-spans",
    )
    table = gr.Dataframe(
        headers=["#", "WordPiece", "P(replaced)", "called replaced", "replaced by the generator"],
        datatype=["number", "str", "number", "str", "str"],
        interactive=False,
        label="Every WordPiece with the discriminator's probability",
        elem_id="replaced_tokens-table",
    )
    raw = _raw(gr)
    gr.Examples(EXAMPLES["replaced_tokens"], inputs=[text], cache_examples=False)
    views = [status, spans, table, raw]

    def run(text):
        return _outputs(predict.replaced_tokens(slot, text, limits), "replaced_tokens")

    def run_corrupt(text, rate, seed):
        result = predict.corrupt(slot, text, rate, seed, limits)
        # On an error the text box keeps what the user wrote (an API caller gets it back).
        new_text = text if result["text"] is None else result["text"]
        return (new_text,) + _outputs(result, "replaced_tokens")

    gr.on(
        [button.click, text.submit],
        run,
        [text],
        views,
        api_name="replaced_tokens",
        **SHARED,
    )
    corrupt.click(run_corrupt, [text, rate, seed], [text] + views, api_name="corrupt", **SHARED)
