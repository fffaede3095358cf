"""The documentation site opened from disk in a real browser (headless Chromium through
Playwright), as a user opens ``site/index.html``: every page of the navigation loads as a page
(not a folder listing), and the search finds pages and opens one. Run by ``nox -s site``:
``python tests/site/check_site.py SITE_DIR [CHROMIUM]``; exit status 1 with the failures listed.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

SEARCHES = {
    "buffer": ("buffer", None),
    "resume": ("resume", "reliability.html"),
    "checkpoint": ("checkpoint", None),
}
"""Queries, each with a word the first result's text must hold and the page it must open (None: any)."""
VIEWPORT = {"width": 1440, "height": 900}
"""A laptop's screen: every table of every page fits the page's width there (none scrolls sideways)."""
OVERFLOWING_TABLES = """() => [...document.querySelectorAll('.md-typeset__scrollwrap')]
    .filter(wrap => wrap.scrollWidth > wrap.clientWidth + 1)
    .map(wrap => (wrap.querySelector('th') || wrap).innerText.slice(0, 40))"""


def check(site: Path, chromium: str) -> list[str]:
    problems: list[str] = []
    index = (site / "index.html").as_uri()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport=VIEWPORT)
        page.goto(index)
        hrefs = page.eval_on_selector_all(
            "nav.md-nav--primary a.md-nav__link[href]", "links => links.map(a => a.href)"
        )
        pages = sorted({href.split("#", 1)[0] for href in hrefs if href.startswith("file:")})
        if len(pages) < 10:
            problems.append(f"the navigation lists {len(pages)} pages: {pages}")
        for url in pages:
            page.goto(url)
            if not url.endswith(".html"):
                problems.append(f"{url}: a navigation link to a folder, not a page")
            elif page.locator("article h1").count() == 0:
                problems.append(f"{url}: no page title (got {page.title()!r})")
            for table in page.evaluate(OVERFLOWING_TABLES):
                problems.append(
                    f"{url}: a table wider than the page at {VIEWPORT['width']} px ({table!r}...)"
                )
        page.goto(index)
        page.locator("nav.md-nav--primary a.md-nav__link:visible").filter(has_text="Commands").first.click()
        if not page.url.endswith("/commands.html") or not page.locator("article h1").inner_text().startswith(
            "Commands"
        ):
            problems.append(f"clicking Commands in the navigation opened {page.url}")
        for query, (word, opens) in SEARCHES.items():
            page.goto(index)
            box = page.locator("input.md-search__input")
            try:
                box.wait_for(state="visible", timeout=10_000)
            except Exception:  # Playwright's timeout: the theme hid the search (it could not start)
                problems.append(f"search {query!r}: no search box")
                continue
            box.click()
            box.press_sequentially(query, delay=30)  # typed as a user types: the search listens to keys
            try:
                page.wait_for_selector(".md-search-result__item", timeout=15_000)
            except Exception:  # Playwright's timeout: the search found nothing or never ran
                problems.append(f"search {query!r}: no result")
                continue
            first = page.locator(".md-search-result__item").first  # its title and the words found
            if word not in first.inner_text().lower():
                problems.append(f"search {query!r}: the first result does not mention {word!r}")
            first.locator("a").first.click()
            page.wait_for_load_state()
            if not page.url.startswith("file:") or page.locator("article h1").count() == 0:
                problems.append(f"search {query!r}: its first result opened {page.url}")
            elif opens is not None and page.url.split("#", 1)[0].split("?", 1)[0].rsplit("/", 1)[-1] != opens:
                problems.append(f"search {query!r}: its first result opened {page.url}, not {opens}")
        browser.close()
    return problems


def main() -> int:
    site = Path(sys.argv[1]).resolve()
    chromium = sys.argv[2] if len(sys.argv) > 2 else shutil.which("chromium") or "chromium"
    problems = check(site, chromium)
    for problem in problems:
        print(f"site: {problem}", file=sys.stderr)
    print(f"site: {'checked' if not problems else 'FAILED'} in Chromium from {site / 'index.html'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
