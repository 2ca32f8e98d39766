"""The app in a real browser: Playwright drives Debian's `chromium` (no browser download) through
every view, typing, clicking, waiting for the answer and checking it, with screenshots.

    PYTHONPATH=. python -m pytest tests/test_app_browser.py -q
    APP_SCREENSHOTS=assets/screenshots APP_BROWSER_MODELS=assets/models \\
        PYTHONPATH=. python -m pytest tests/test_app_browser.py -q     # real models, for the README

Needs `apt-get install chromium` and `pip install playwright` (`.ci/run` does both; never
`playwright install`). Without them the test is skipped, saying which is missing. The views run
on the tiny LiteRT bundles of tests/test_app.py (random weights: what they say is checked for
form, not meaning); APP_BROWSER_MODELS=DIR serves the bundles of DIR instead. The Replaced
tokens view, shown only with an ELECTRA bundle, runs on the tiny ELECTRA run's bundle beside them
(or on DIR's "electra" bundle, when DIR has one); without one the app has no such tab. Screenshots
go to the test's tmp dir, and also to $APP_SCREENSHOTS when set.
"""

from __future__ import annotations

import os
import re
import shutil

import pytest

from app.models import VIEW
from app.ui import LONG_REVIEW
from tests.test_app import (  # noqa: F401 (fixtures)
    ELECTRA_TEXT,
    SENTENCE,
    electra_models,
    served,
    tiny_models,
)

# The browser and load tests are the slow tier's (python -m pytest --runslow).
pytestmark = pytest.mark.slow

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TIMEOUT_MS = 30_000
# The text element of a status line (Gradio's Markdown), the app's live region.
MARKDOWN = '[data-testid="markdown"]'
# The contrast ratio (WCAG 2) of an element's text colour against the first opaque background
# at or above it.
CONTRAST_JS = """(element) => {
  const rgba = (c) => c.match(/[\\d.]+/g).map(Number);
  const luminance = (c) => {
    const [r, g, b] = rgba(c).slice(0, 3).map((v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  let e = element, background = 'rgb(255, 255, 255)';
  for (; e; e = e.parentElement) {
    const c = getComputedStyle(e).backgroundColor, v = rgba(c);
    if (v.length < 4 || v[3] > 0.5) { background = c; break; }
  }
  const a = luminance(getComputedStyle(element).color), b = luminance(background);
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""
# The first render loads Gradio's whole front end: on two cores shared with other jobs it has
# taken over 30 s (a CI run beside three model evaluations), so it gets longer.
FIRST_RENDER_MS = 120_000


def chromium_path() -> str | None:
    for candidate in (
        os.environ.get("APP_CHROMIUM"),
        shutil.which("chromium"),
        "/usr/bin/chromium",
        shutil.which("chromium-browser"),
    ):
        if candidate and os.path.isfile(candidate):
            return candidate
    return None


@pytest.fixture(scope="module")
def browser():
    # CI sets BERT_REQUIRE_BROWSER=1: there a missing browser fails the test
    # instead of skipping it, so a broken install cannot pass unnoticed.
    missing = pytest.fail if os.environ.get("BERT_REQUIRE_BROWSER") == "1" else pytest.skip
    try:
        from playwright import sync_api
    except ImportError:
        missing("pip install playwright (see .ci/run)")
    path = chromium_path()
    if path is None:
        missing("no chromium: apt-get install -y chromium (see .ci/run)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def app_url(tiny_models):
    from app import models

    slots = models.load_all(os.environ.get("APP_BROWSER_MODELS") or tiny_models[1])
    assert all(slot.ready for slot in slots.values()), [s.problem for s in slots.values()]
    with served(slots) as demo:
        yield demo.local_url


class Shots:
    """Screenshots into the test's tmp dir, and into $APP_SCREENSHOTS when set."""

    def __init__(self, page, tmp_path):
        self.page, self.dirs = page, [str(tmp_path)]
        if os.environ.get("APP_SCREENSHOTS"):
            os.makedirs(os.environ["APP_SCREENSHOTS"], exist_ok=True)
            self.dirs.append(os.environ["APP_SCREENSHOTS"])
        self.taken = []

    def __call__(self, name: str):
        for d in self.dirs:
            path = os.path.join(d, f"{name}.png")
            self.page.screenshot(path=path, full_page=True)
            self.taken.append(path)


def test_every_view_in_chromium(browser, app_url, tmp_path):
    from playwright.sync_api import expect

    url = app_url
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(TIMEOUT_MS)
    outside = []
    page.on(
        "request",
        lambda r: (
            outside.append(r.url)
            if not r.url.startswith((url.rstrip("/"), "data:", "blob:"))
            else None
        ),
    )
    shot = Shots(page, tmp_path)
    page.goto(url, timeout=FIRST_RENDER_MS)
    expect(page.get_by_text("The capital of France is [MASK].", exact=True)).to_be_visible(
        timeout=FIRST_RENDER_MS
    )

    def run(view: str, fields: dict, button: str = "run"):
        page.get_by_role("tab", name=VIEW[view].title, exact=True).click()
        for name, text in fields.items():
            page.locator(f"#{view}-{name} textarea").fill(text)
        page.locator(f"#{view}-{button}").click()

    def status(view: str):
        return page.locator(f"#{view}-status")

    # Masked words: an example fills the box; the bars and the filled sentence appear.
    page.get_by_text("The capital of France is [MASK].", exact=True).click()
    expect(page.locator("#fill_mask-text textarea")).to_have_value(
        "The capital of France is [MASK]."
    )
    run("fill_mask", {"text": "The cat sat on the [MASK]."})
    expect(status("fill_mask")).to_contain_text("Filled 1 [MASK]")
    expect(status("fill_mask").locator(MARKDOWN)).to_have_attribute(
        "aria-live", "polite"
    )  # announced
    expect(page.locator("#fill_mask-bars .mask-card")).to_have_count(1)
    assert page.locator("#fill_mask-bars .bar-row").count() == 5
    expect(page.locator("#fill_mask-filled")).to_contain_text("The cat sat on the")
    expect(page.locator("#fill_mask-filled")).to_contain_text("[MASK] 1, ")  # the mask's label
    shot("fill_mask")
    # No [MASK]: a message, not a stack trace.
    run("fill_mask", {"text": "There is nothing to fill here."})
    expect(status("fill_mask")).to_contain_text("The text has no [MASK]")

    # Attention: a sentence pair; choose a token by clicking it, a head from the grid, a layer.
    run("attention", {"text": "The cat sat on the mat.", "pair": "Where is it?"})
    heatmap = page.locator("#attention-head-map table.attn")
    expect(heatmap).to_be_visible()
    tokens = page.locator("#attention-head-map th.row")
    assert "[SEP]" in tokens.all_inner_texts()
    expect(status("attention")).to_contain_text("Layer 1, head 1")
    page.locator("#attention-head-map th.row[data-token='3']").click()
    expect(status("attention")).to_contain_text("(WordPiece 3 of the input) attends most to")
    expect(page.locator("#attention-head-map tr.sel th.row")).to_have_attribute("data-token", "3")
    page.locator("#attention-grid figure[data-head='2']").click()
    expect(status("attention")).to_contain_text("Layer 1, head 2")
    expect(page.locator("#attention-grid figure.sel")).to_have_attribute("data-head", "2")
    page.locator("#attention-layer").get_by_label("2", exact=True).check()
    expect(status("attention")).to_contain_text("Layer 2, head 2")
    # A radio group is one Tab stop whose arrow keys move its choice (Gradio names each option
    # apart: each was a Tab stop, and the arrow keys did nothing).
    page.keyboard.press("ArrowLeft")
    expect(status("attention")).to_contain_text("Layer 1, head 2")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('[id]').id") == "attention-head"
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("ArrowRight")
    expect(status("attention")).to_contain_text("Layer 2, head 2")
    page.locator("#attention-attends").get_by_text("[CLS]", exact=True).first.click()
    expect(status("attention")).to_contain_text("“[CLS]” (WordPiece 0 of the input)")
    page.locator("#attention-token input").click()  # choose a token from the list
    page.get_by_role("option", name="4: on", exact=True).click()
    expect(status("attention")).to_contain_text("“on” (WordPiece 4 of the input)")
    shot("attention")

    # On a narrow screen the two maps stack (their captions readable), and nothing makes the
    # page scroll sideways.
    page.set_viewport_size({"width": 400, "height": 900})
    above = page.locator("#attention-head-map").bounding_box()
    below = page.locator("#attention-average-map").bounding_box()
    assert below["y"] >= above["y"] + above["height"] - 1, (above, below)
    assert page.evaluate("document.documentElement.scrollWidth") <= 400
    page.set_viewport_size({"width": 1280, "height": 900})

    # Sentiment (Shift+Enter in the box runs it, as its hint says), and an empty input.
    page.get_by_role("tab", name=VIEW["sentiment"].title, exact=True).click()
    page.locator("#sentiment-text textarea").fill("A good, warm and funny film.")
    page.locator("#sentiment-text textarea").press("Shift+Enter")
    expect(status("sentiment")).to_contain_text("%")
    expect(status("sentiment").locator(MARKDOWN)).to_have_attribute("aria-live", "polite")
    expect(page.locator("#sentiment-label")).to_contain_text("positive")
    expect(page.locator("#sentiment-label")).to_contain_text("negative")
    shot("sentiment")
    run("sentiment", {"text": LONG_REVIEW})  # longer than the model: read in windows
    expect(status("sentiment")).to_contain_text("overlapping windows")
    run("sentiment", {"text": "   "})
    expect(status("sentiment")).to_contain_text("The text is empty")

    # Question answering: the answer highlighted in its context, the n-best list; Shift+Enter
    # in the context runs it.
    context = "The cat sat on the mat while the dog slept in the garden."
    page.get_by_role("tab", name=VIEW["answer"].title, exact=True).click()
    page.locator("#answer-question input, #answer-question textarea").first.fill("Where?")
    page.locator("#answer-context textarea").fill(context)
    page.locator("#answer-context textarea").press("Shift+Enter")
    expect(status("answer")).to_contain_text("% likely")
    expect(page.locator("#answer-nbest")).to_contain_text("probability")
    answer = status("answer").locator("strong").first.inner_text()
    assert answer and answer in context
    expect(page.locator("#answer-context-view")).to_contain_text("answer")
    shot("answer")

    # Named entities: spans highlighted by type, a table with confidences.
    run("entities", {"text": SENTENCE})
    expect(status("entities")).to_contain_text("in 6 words")
    expect(page.locator("#entities-spans")).to_contain_text("Washington")
    expect(page.locator("#entities-table")).to_contain_text("confidence")
    # Each entity's type is written beside it (Gradio's inline labels), not shown by its
    # colour alone in a legend.
    rows = page.locator('#entities-table [role="row"]:not([aria-rowindex="1"])')  # not the head
    expect(rows.first).to_be_visible()
    types = sorted(
        row.locator('[role="gridcell"]').nth(1).inner_text().strip() for row in rows.all()
    )
    labels = page.locator("#entities-spans .label")
    expect(labels).to_have_count(len(types))
    assert types and sorted(t.strip() for t in labels.all_inner_texts()) == types
    assert not page.locator('[data-testid="highlighted-text:category-legend"]').count()
    shot("entities")

    # The tabs are one Tab stop, the selected tab's; arrow keys, Home and End choose another.
    tabs = page.get_by_role("tab")
    names = [t.inner_text().strip() for t in tabs.all()]
    page.get_by_role("tab", name=names[0], exact=True).click()
    for key, chosen in (("ArrowRight", 1), ("End", -1), ("ArrowRight", 0), ("ArrowLeft", -1)):
        page.keyboard.press(key)
        expect(page.get_by_role("tab", selected=True)).to_have_text(names[chosen])
        assert page.evaluate("document.activeElement.textContent").strip() == names[chosen]
    expected = ["-1"] * len(names)
    expected[-1] = "0"
    assert [t.get_attribute("tabindex") for t in tabs.all()] == expected

    # Keyboard users see the focus; text on the app's colours is at least 4.5:1 (WCAG AA).
    page.get_by_role("tab", name=VIEW["fill_mask"].title, exact=True).click()
    page.locator("#fill_mask-run").focus()
    page.keyboard.press("Shift+Tab")  # to the slider, whose focus Gradio does not show
    assert page.evaluate("document.activeElement.type") == "range"
    assert page.evaluate("getComputedStyle(document.activeElement).outlineWidth") == "3px"
    for element in (
        page.locator("#fill_mask-run"),
        page.get_by_role("tab", name=VIEW["fill_mask"].title, exact=True),
    ):
        assert element.evaluate(CONTRAST_JS) >= 4.5, element

    assert not page.locator("text=Traceback").count()
    assert not outside, f"the page fetched from outside the app: {outside}"
    assert all(os.path.getsize(p) > 10_000 for p in shot.taken)
    page.close()


@pytest.fixture(scope="module")
def electra_url(electra_models):
    """The app over the tiny bundles and the tiny ELECTRA bundle (or $APP_BROWSER_MODELS, when
    it has an ELECTRA bundle)."""
    from app import models

    chosen = os.environ.get("APP_BROWSER_MODELS")
    slots = models.load_all(chosen) if chosen else {}
    if "replaced_tokens" not in slots:
        slots = models.load_all(electra_models["models"])
    assert all(slot.ready for slot in slots.values()), [s.problem for s in slots.values()]
    with served(slots) as demo:
        yield demo.local_url, slots["replaced_tokens"].model


def test_replaced_tokens_view_in_chromium(browser, electra_url, tmp_path):
    from playwright.sync_api import expect

    url, model = electra_url
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.set_default_timeout(TIMEOUT_MS)
    shot = Shots(page, tmp_path)
    page.goto(url, timeout=FIRST_RENDER_MS)
    tab = page.get_by_role("tab", name=VIEW["replaced_tokens"].title, exact=True)
    expect(tab).to_be_visible(timeout=FIRST_RENDER_MS)
    tab.click()
    status = page.locator("#replaced_tokens-status")
    box = page.locator("#replaced_tokens-text textarea")

    # An example fills the box; the discriminator's calls on it.
    page.get_by_text("The chef ate the meal.", exact=True).click()
    expect(box).to_have_value("The chef ate the meal.")
    box.fill(ELECTRA_TEXT)
    page.locator("#replaced_tokens-run").click()
    expect(status).to_contain_text("replaced")
    expect(page.locator("#replaced_tokens-table")).to_contain_text("P(replaced)")
    expect(page.locator("#replaced_tokens-table")).to_contain_text("dog")
    expect(page.locator("#replaced_tokens-spans")).to_contain_text("dog ran fast")

    # The Seed box starts empty, as its label says: a new seed each time.
    seed = page.locator("#replaced_tokens-seed input")
    expect(seed).to_have_value("")
    seeds = []
    for _ in range(2):
        box.fill(ELECTRA_TEXT)
        page.locator("#replaced_tokens-corrupt").click()
        if seeds:
            expect(status).not_to_contain_text(seeds[-1])
        expect(status).to_contain_text("The generator replaced")
        seeds.append(re.search(r"seed \d+\)", status.inner_text()).group(0))
    assert seeds[0] != seeds[1] and "seed 0)" not in seeds, seeds
    box.fill(ELECTRA_TEXT)

    # The generator corrupts the sentence (seed 3): the box shows the runtime's corrupted text,
    # and the discriminator's calls on it are checked against what the generator did.
    page.locator("#replaced_tokens-seed input").fill("3")
    page.locator("#replaced_tokens-corrupt").click()
    expected = model.corrupt(ELECTRA_TEXT, 0.15, 3)["text"]
    expect(box).to_have_value(expected)
    expect(status).to_contain_text("The generator replaced")
    expect(status).to_contain_text("seed 3")
    expect(page.locator("#replaced_tokens-spans")).to_contain_text(expected.split()[-1])
    shot("replaced_tokens")

    # Bad input: a message, the text kept.
    box.fill("   ")
    page.locator("#replaced_tokens-run").click()
    expect(status).to_contain_text("The text is empty")
    assert not page.locator("text=Traceback").count()
    page.close()


def test_no_replaced_tokens_tab_without_an_electra_bundle(browser, tiny_models):
    """On the tests' tiny bundles, which have no ELECTRA one, whatever APP_BROWSER_MODELS
    says (assets/models has one)."""
    from playwright.sync_api import expect

    from app import models

    slots = models.load_all(tiny_models[1])
    assert "replaced_tokens" not in slots
    with served(slots) as demo:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(demo.local_url, timeout=FIRST_RENDER_MS)
        expect(page.get_by_role("tab", name=VIEW["entities"].title, exact=True)).to_be_visible(
            timeout=FIRST_RENDER_MS
        )
        expect(page.get_by_role("tab")).to_have_count(5)
        expect(page.get_by_role("tab", name=VIEW["replaced_tokens"].title)).to_have_count(0)
        page.close()
