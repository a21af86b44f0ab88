"""The wiki's generated content: pages whose render costs spread as
Wikipedia's do, their dump for importDump.php, and their URL paths."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from xml.sax.saxutils import escape

from harness.wiki.install import SCRIPT_PATH


# Templates in the style of Wikipedia's, with ParserFunctions: an infobox with
# a branch per field, a citation template (the commonest template on Wikipedia,
# used once per reference), a navbox (a table of links), and a small
# arithmetic template. Render cost grows with how often they are used.
_CITE_FIELDS = ("author", "date", "title", "url", "journal", "publisher", "volume", "pages", "access-date")
_CITE_ARGS = "|".join(f"{f}={{{{{{{f}|}}}}}}" for f in _CITE_FIELDS)
TEMPLATES = {
    "Infobox": """<includeonly>{| class="infobox" style="float:right; width:22em"
|+ '''{{{name|{{PAGENAME}}}}}'''
{{#if:{{{image|}}}|{{!}} colspan="2" {{!}} [[File:{{{image}}}|200px]]}}
{{#for_fields}}
|}</includeonly>""",
    # Wikipedia's citation templates hand every field to a core template that
    # formats it and also emits COinS metadata (each field URL-encoded): a
    # reference costs dozens of parser-function calls, which is what makes long,
    # well-referenced pages the expensive ones to render.
    "Cite": ("<includeonly>{{Cite/core|" + _CITE_ARGS + "|mode=display}}"
             '<span class="Z3988" title="ctx_ver=Z39.88-2004{{Cite/core|' + _CITE_ARGS + '|mode=coins}}"></span></includeonly>'),
    "Cite/core": "<includeonly>" + "".join(
        "{{#ifeq:{{{mode}}}|coins|{{#if:{{{" + f + "|}}}|&rft." + f + "={{urlencode:{{{" + f + "}}}}}}}|{{#if:{{{" + f + "|}}}|"
        "{{#switch:" + f + "|author={{{author}}}.|date=({{#time:Y|{{{date}}}-01-01}}).|title=\"{{#if:{{{url|}}}|[{{{url}}} {{{title}}}]|{{{title}}}}}\""
        "|journal=''{{{journal}}}''|volume='''{{{volume}}}'''|pages=pp. {{{pages}}}|access-date=Retrieved {{#time:j F Y|{{{access-date}}}}}."
        "|#default={{{" + f + "}}}}} }}}}"
        for f in _CITE_FIELDS) + "</includeonly>",
    "Navbox": """<includeonly>{| class="navbox" style="width:100%"
! colspan="2" | {{{title}}}
|-
| {{{list1|}}}
|-
| {{{list2|}}}
|-
| {{{list3|}}}
|}</includeonly>""",
    "Convert": """<includeonly>{{{1}}} {{{2}}} ({{#expr:{{{1}}}*{{#switch:{{{2}}}|km=0.621371|m=3.28084|kg=2.20462|#default=1}} round 1}} {{#switch:{{{2}}}|km=mi|m=ft|kg=lb|#default={{{2}}}}})</includeonly>""",
}
INFOBOX_FIELDS = 24
TEMPLATES["Infobox"] = TEMPLATES["Infobox"].replace("{{#for_fields}}", "\n".join(
    f"{{{{#if:{{{{{{field{i}|}}}}}}|\n{{{{!}}}}-\n! Field {i}\n{{{{!}}}} {{{{{{field{i}}}}}}}}}}}" for i in range(1, INFOBOX_FIELDS + 1)))

WORDS = ("the of and in to a is was for on as by with from at that which an were his are be this it or had "
         "first also new after city river county state school war party government system village species "
         "population district university album film season team league music game series station church").split()


def _sentence(rng: random.Random, titles: list[str]) -> str:
    n = rng.randint(8, 24)
    out = []
    for _ in range(n):
        if titles and rng.random() < 0.06:
            out.append(f"[[{rng.choice(titles)}]]")
        else:
            out.append(rng.choice(WORDS))
    return " ".join(out).capitalize() + "."


def _cite(rng: random.Random, k: int) -> str:
    return ("<ref>{{Cite|author=Author " + str(k) + "|date=" + str(rng.randint(1950, 2024)) + "|title=Source number " + str(k)
            + "|url=http://example.org/" + str(rng.randrange(10**6)) + "|journal=Journal " + str(k % 17) + "|volume=" + str(k % 40)
            + "|pages=" + str(rng.randint(1, 300)) + "|access-date=2024-0" + str(1 + k % 9) + "-1" + str(k % 10) + "}}</ref>")


@dataclass
class Page:
    title: str
    text: str
    # what it was made of, for the docs and the trace generator
    refs: int = 0
    sections: int = 0


def generate_pages(n: int, seed: int = 1) -> list[Page]:
    """`n` articles whose prose length is lognormal (median about 4 KB,
    sigma 1.1, 300 B to 250 KB: Wikipedia's articles run from stubs to long
    featured articles, with a median of a few KB), and whose render costs
    follow from what they contain, as on Wikipedia: one citation template per
    reference (about one per 400 bytes of prose, each a nested template with
    COinS metadata), an infobox on 60% of pages (up to 24 fields, each a
    ParserFunctions branch), 0-3 navboxes, a table on 3% of paragraphs, unit
    conversions (#expr). With the templates the wikitext's median is about
    8.6 KB. What a page costs to render, from the cache and anew, is measured by
    bench/wiki_costs.py (docs/wiki.md gives the spread). Deterministic for a
    seed. Titles are `Article 00000` on (bench/wiki_trace.py's page_title)."""
    if n < 1:
        raise ValueError("generate_pages: n must be >= 1")
    rng = random.Random(seed)
    titles = [f"Article {i:05d}" for i in range(n)]
    pages = []
    for i, title in enumerate(titles):
        size = min(250_000, max(300, int(rng.lognormvariate(math.log(4000), 1.1))))
        parts, refs, sections = [], 0, 0
        if rng.random() < 0.6:
            fields = "|".join(f"field{j}={rng.choice(WORDS)} {rng.randint(1, 9999)}" for j in range(1, rng.randint(6, INFOBOX_FIELDS) + 1))
            parts.append("{{Infobox|name=" + title + "|" + fields + "}}")
        length = 0
        while length < size:
            if length and rng.random() < 0.08:
                sections += 1
                parts.append(f"\n== Section {sections} ==\n")
            para = " ".join(_sentence(rng, titles) for _ in range(rng.randint(2, 6)))
            if rng.random() < 0.1:
                para += " It is {{Convert|" + str(rng.randint(1, 900)) + "|" + rng.choice(["km", "m", "kg"]) + "}} long."
            length += len(para)
            while refs * 400 < length:
                refs += 1
                para += _cite(rng, refs)
            parts.append(para + "\n\n")
            if rng.random() < 0.03:
                rows = "\n".join(f"|-\n| {rng.choice(WORDS)} || {rng.randint(1, 10**6)} || {rng.choice(WORDS)}" for _ in range(rng.randint(5, 40)))
                parts.append('{| class="wikitable"\n! Name !! Value !! Note\n' + rows + "\n|}\n")
        if refs:
            parts.append("\n== References ==\n<references />\n")
        for k in range(rng.choice([0, 0, 1, 1, 2, 3])):
            lists = "|".join(f"list{j}=" + " · ".join(f"[[{rng.choice(titles)}]]" for _ in range(rng.randint(10, 40))) for j in (1, 2, 3))
            parts.append("{{Navbox|title=Topic " + str(k) + "|" + lists + "}}\n")
        parts.append(f"[[Category:Group {i % 50}]]\n")
        pages.append(Page(title, "".join(parts), refs, sections))
    return pages


def dump_xml(pages: list[Page]) -> str:
    """A MediaWiki XML export (schema 0.11) of the templates and `pages`, for importDump.php."""
    out = ['<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.11/" version="0.11" xml:lang="en">']

    def page(title: str, ns: int, text: str) -> None:
        out.append(f"<page><title>{escape(title)}</title><ns>{ns}</ns><revision><timestamp>2024-01-01T00:00:00Z</timestamp>"
                   f"<contributor><username>Importer</username></contributor><model>wikitext</model><format>text/x-wiki</format>"
                   f'<text xml:space="preserve">{escape(text)}</text></revision></page>')

    for name, text in TEMPLATES.items():
        page(f"Template:{name}", 10, text)
    for p in pages:
        page(p.title, 0, p.text)
    out.append("</mediawiki>\n")
    return "\n".join(out)


def page_path(title: str) -> str:
    """The URL path of a page view, as in the paper's trace (`/wiki/index.php?title=...`)."""
    return f"{SCRIPT_PATH}/index.php?title={title.replace(' ', '_')}"


