"""The handout (app/tour/handout.py) as a PDF, with no browser: fpdf2 lays out the words (A4, a title page, then each
step from a new page), vl-convert renders each figure as a one-page vector PDF, and pypdf stamps those pages
into the boxes left for them.

Text is set in a Unicode TrueType font of the machine (DejaVu Sans or Liberation Sans on Linux, Arial on macOS
and Windows); on a machine with none of them, in the PDF's built-in Helvetica, with the few characters it
lacks written out (≥ as >=, τ as tau).
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

import vl_convert as vlc
from fpdf import FPDF
from pypdf import PdfReader, PdfWriter, Transformation

from app.tour.handout import VERDICTS_SAID, Figure, Handout, HandoutStep, plain
from core.claims.base import VERDICT_LABELS

#: (regular, bold, italic) font files, the first set found is used
FONT_FILES = [
    ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf"),
    (
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
        "LiberationSans-Bold.ttf",
        "LiberationSans-Italic.ttf",
    ),
    ("/usr/share/fonts/TTF/DejaVuSans.ttf", "DejaVuSans-Bold.ttf", "DejaVuSans-Oblique.ttf"),
    ("/Library/Fonts/Arial.ttf", "Arial Bold.ttf", "Arial Italic.ttf"),
    ("/System/Library/Fonts/Supplemental/Arial.ttf", "Arial Bold.ttf", "Arial Italic.ttf"),
    ("C:/Windows/Fonts/arial.ttf", "arialbd.ttf", "ariali.ttf"),
]
#: What Helvetica (Latin-1) cannot print, written out
LATIN1_SPELLED = {
    "≥": ">=",
    "≤": "<=",
    "↔": "<->",
    "→": "->",
    "τ": "tau",
    "κ": "kappa",
    "“": '"',
    "”": '"',
    "‘": "'",
    "’": "'",
    "–": "-",
    "—": "-",
    "…": "...",
    "✓": "right",
    "✗": "wrong",
    "·": "-",
    "◀": "<",
    "▶": ">",
    "−": "-",
}
VERDICT_RGB = {
    "agrees": (26, 127, 55),
    "partly": (179, 89, 0),
    "does not": (207, 34, 46),
    "not tested": (110, 119, 129),
    "does not apply": (140, 149, 159),
}
MUTED = (87, 96, 106)
#: The largest box a figure gets (mm): wider than the text (a wide figure's type stays readable), most of a page
FIGURE_MAX_W, FIGURE_MAX_H = 190.0, 200.0
#: A figure is shrunk to fit the rest of its step's page while its smallest text stays at least this size (points);
#: else it starts the next page, where it has the whole page
MIN_TEXT_PT = 7.0
#: Room kept under a figure for its caption (mm)
CAPTION_ROOM = 16.0
#: The headings of a step's detail blocks, after its figures (a page may open with one)
ALL_NUMBERS, WORDS = "All the numbers", "Words on this step"
#: A caption's type (pt) and the gap under it (mm)
CAPTION_PT, CAPTION_GAP = 8.5, 3.0
MM = 72 / 25.4  # points per mm


@dataclass(frozen=True)
class Placement:
    """Where a figure's PDF page goes: page index (0-based), box in mm from the top left, and the size (points) its
    smallest text prints at."""

    page: int
    x: float
    y: float
    w: float
    h: float
    pdf: bytes
    smallest_text_pt: float


def smallest_font(spec) -> float:
    """The smallest font size (px) a Vega-Lite spec sets anywhere (titles, axes, legends, text marks, headers)."""
    if isinstance(spec, dict):
        sizes = [float(v) for k, v in spec.items() if k.endswith("ontSize") and isinstance(v, (int, float))]
        return min(sizes + [smallest_font(v) for v in spec.values()], default=float("inf"))
    if isinstance(spec, list):
        return min([smallest_font(v) for v in spec] + [float("inf")])
    return float("inf")


def font_files() -> tuple[Path, Path, Path] | None:
    for regular, bold, italic in FONT_FILES:
        r = Path(regular)
        if r.is_file() and (r.parent / bold).is_file() and (r.parent / italic).is_file():
            return r, r.parent / bold, r.parent / italic
    return None


class HandoutPDF(FPDF):
    """An A4 page with the run and page number in its footer."""

    def __init__(self, footer_text: str):
        super().__init__(format="A4", unit="mm")
        self.footer_text = footer_text
        self.set_margins(20, 18, 20)
        self.set_auto_page_break(True, margin=18)
        files = font_files()
        self.has_unicode = files is not None
        if files:
            for style, path in zip(("", "B", "I"), files):
                self.add_font("Body", style, str(path))
            self.body_font = "Body"
        else:
            self.body_font = "helvetica"

    def text_of(self, text: str) -> str:
        if self.has_unicode:
            return text
        for a, b in LATIN1_SPELLED.items():
            text = text.replace(a, b)
        return text.encode("latin-1", "replace").decode("latin-1")

    def footer(self):
        self.set_y(-12)
        self.use_style("", 8, MUTED)
        self.cell(0, 5, self.text_of(f"{self.footer_text} · page {self.page_no()}"), align="C")

    def use_style(self, emphasis: str = "", size: float = 10.5, colour=(31, 35, 40)):
        self.set_font(self.body_font, emphasis, size)
        self.set_text_color(*colour)

    def height_of(self, text: str, size: float, gap: float = 1.6) -> float:
        """How tall (mm) `rich` would write `text` at `size` across the page, without writing it."""
        self.use_style("", size)
        lines = self.multi_cell(0, size * 0.48, plain(self.text_of(text)), dry_run=True, output="LINES")
        return len(lines) * size * 0.48 + gap

    def rich(self, text: str, size: float = 10.5, colour=(31, 35, 40), emphasis: str = "", gap: float = 1.6):
        """A paragraph whose **bold** parts are bold (the claims' markdown), wrapped to the page."""
        line = size * 0.48
        for i, part in enumerate(re.split(r"\*\*", self.text_of(text))):
            self.use_style("B" if i % 2 else emphasis, size, colour)
            self.write(line, plain(part))
        self.ln(line + gap)


def figure_pdf(spec: dict) -> tuple[bytes, float, float]:
    """A figure as a one-page vector PDF (vl-convert), with its size in points."""
    data = vlc.vegalite_to_pdf(spec)
    box = PdfReader(io.BytesIO(data)).pages[0].mediabox
    return data, float(box.width), float(box.height)


def place_figure(pdf: HandoutPDF, figure: Figure, placements: list[Placement]) -> None:
    """A figure in presentation mode's type (its `large_spec`), as wide as the text, shrunk to the rest of the page
    while its smallest text stays at least MIN_TEXT_PT, else on the next page (whole: never cut)."""
    spec = figure.large_spec if figure.large_spec is not None else figure.spec
    data, w_pt, h_pt = figure_pdf(spec)
    font = min(smallest_font(spec), 11.0)  # Vega's own defaults are 10-11 px where a spec sets none
    w = min(FIGURE_MAX_W, w_pt / MM)
    h = w * h_pt / w_pt
    if h > FIGURE_MAX_H:
        w, h = w * FIGURE_MAX_H / h, FIGURE_MAX_H
    caption = max(CAPTION_ROOM, pdf.height_of(figure.caption, CAPTION_PT, CAPTION_GAP))  # kept with its figure
    room = pdf.h - pdf.b_margin - pdf.get_y() - caption - (6 if figure.label else 0)
    smallest_w = MIN_TEXT_PT / font * w_pt / MM  # the narrowest it may print at
    if h > room and room > 0 and w * room / h >= smallest_w:  # shrink it onto this page, its text still readable
        w, h = w * room / h, room
    elif h > room:
        pdf.add_page()
    if figure.label:  # on the page of its figure
        pdf.rich(f"**{figure.label}**", 10, gap=1)
    x = (pdf.w - w) / 2  # centred on the page: a figure wider than the text reaches into the margins
    placements.append(Placement(pdf.page_no() - 1, x, pdf.get_y(), w, h, data, font * w * MM / w_pt))
    pdf.set_y(pdf.get_y() + h + 1.5)


def place_table(pdf: HandoutPDF, figure: Figure, pages: list[int]) -> None:
    """A table of numbers, whole on one page (the next, when the rest of this one cannot hold it); its page goes
    into `pages`."""
    frame, formats = figure.table, figure.formats or {}
    caption = max(CAPTION_ROOM, pdf.height_of(figure.caption, CAPTION_PT, CAPTION_GAP))
    height = 4.6 * (len(frame) + 2) + caption + (6 if figure.label else 0)  # a wrapped row: the heading's share
    if height > pdf.h - pdf.b_margin - pdf.get_y():
        pdf.add_page()
    first = pdf.page_no() - 1
    if figure.label:  # on the page of its table
        pdf.rich(f"**{figure.label}**", 10, gap=1)
    pdf.use_style("", 8.5)
    with pdf.table(text_align="LEFT", line_height=4.6, first_row_as_headings=True) as table:
        table.row([pdf.text_of(str(c)) for c in frame.columns])
        for _, row in frame.iterrows():
            cells = []
            for c in frame.columns:
                v = row[c]
                cells.append("" if v != v or v is None else (formats[c] % v if c in formats else str(v)))
            table.row([pdf.text_of(x) for x in cells])
    pages.extend(range(first, pdf.page_no()))  # every page it covers (a table longer than a page goes on)
    pdf.ln(1.5)


def write_title_page(pdf: HandoutPDF, h: Handout) -> None:
    """What a student needs before the steps: the model, the questions, the accuracy, how a step reads."""
    pdf.add_page()
    pdf.use_style("B", 22)
    pdf.multi_cell(0, 10, pdf.text_of(h.title), align="L")
    pdf.rich(
        "Zhou et al., Pre-trained Large Language Models Use Fourier Features to Compute Addition (NeurIPS 2024), "
        "step by step on one model.",
        11,
        MUTED,
        gap=5,
    )
    for name, value in (("Model", h.run_label), ("Questions", h.questions_line),
                        ("Accuracy", h.accuracy_line)):
        pdf.rich(f"**{name}:** {value}", 10.5, gap=2.4)
    pdf.ln(3)
    pdf.rich(
        "Each step: the question, the paper's finding (its model, its number), this run's measurement computed from "
        f"its tables, a verdict ({VERDICTS_SAID}) with its reason, the terms it uses and the figure. Every figure's "
        "caption says how many questions it rests on, from which split. Where the model and these numbers come from "
        'is on the last page, "About this handout".',
        10,
        MUTED,
    )


def write_about_page(pdf: HandoutPDF, h: Handout) -> None:
    """The provenance a researcher checks: the model's recipe, where the accuracy is read, the cache, the export."""
    pdf.add_page()
    pdf.use_style("B", 16)
    pdf.multi_cell(0, 8, pdf.text_of("About this handout"), align="L")
    pdf.ln(2)
    best = (
        "Each step shows the shipped run that shows it best (the Tour's toggle was on); a note says where that is "
        "not this run."
        if h.best
        else "Every step shows this run."
    )
    for name, value in (("Model", h.model), ("Accuracy", f"{h.accuracy_line}, from {h.accuracy_source}"),
                        ("Cache", h.version_line), ("Made", f"{h.exported}, Fourier basis '{h.basis}'. {best}")):
        pdf.rich(f"**{name}:** {value}", 10, gap=2.4)


def write_step(pdf: HandoutPDF, step: HandoutStep, placements: list[Placement], table_pages: list[int]) -> None:
    """One step from a new page: its question, claim, verdict and reason, its figures with their captions (a figure
    that does not fit the rest of the page starts the next one, its caption kept with it), then every number it
    measured and the words it uses (together, on the next page when they do not fit the rest of this one)."""
    c = step.claim
    pdf.add_page()
    pdf.use_style("B", 16)
    pdf.multi_cell(0, 8, pdf.text_of(step.title), align="L")
    pdf.rich(step.question, 10.5, MUTED, "I", gap=2.5)
    pdf.rich(f"**Predict first:** {step.predict}", 10.5, gap=0.8)
    for letter, choice in zip("ABCDEFG", step.choices):
        pdf.set_x(pdf.l_margin + 5)
        pdf.rich(f"{letter}. {choice}", 10, gap=0.4)
    pdf.ln(2)
    pdf.rich(f"**The paper:** {c.paper}", 10.5)
    pdf.use_style("B", 10.5, (255, 255, 255))
    pdf.set_fill_color(*VERDICT_RGB[c.verdict])
    word = pdf.text_of(VERDICT_LABELS[c.verdict])
    pdf.cell(pdf.get_string_width(word) + 4, 6, word, fill=True, new_x="LMARGIN", new_y="NEXT")
    pdf.set_fill_color(246, 248, 250)  # table headings
    pdf.ln(1.5)
    pdf.rich(f"**{step.who}:** {step.line}", 10.5)
    pdf.rich(f"**Why “{VERDICT_LABELS[c.verdict]}”:** {step.why}", 9, MUTED, gap=0.8)
    for line in (step.note, step.missing):
        if line:
            pdf.rich(line, 9.5, (120, 80, 0))
    pdf.ln(2)
    for figure in step.figures:
        if figure.spec is not None:
            place_figure(pdf, figure, placements)
        else:
            place_table(pdf, figure, table_pages)
        pdf.rich(figure.caption, CAPTION_PT, MUTED, gap=CAPTION_GAP)
    # after the evidence, the detail: every number measured, then the words the step uses, each block kept together
    # (a block that would run over the page starts the next one under its heading: no page opens mid-sentence)
    numbers = f"**{ALL_NUMBERS}. {step.measured_by}:** {c.measured}"
    keep_together(pdf, pdf.height_of(numbers, 9))
    pdf.rich(numbers, 9, MUTED)
    terms = [f"**{name}:** {definition}" for name, definition in step.terms]
    if terms:
        keep_together(pdf, pdf.height_of(WORDS, 9, 0.8) + sum(pdf.height_of(t, 8.5, 0.8) for t in terms))
        pdf.rich(f"**{WORDS}**", 9, MUTED, gap=0.8)
    for term in terms:
        pdf.rich(term, 8.5, MUTED, gap=0.8)


def keep_together(pdf: HandoutPDF, height: float) -> None:
    """A new page before a block of `height` mm that would run over the rest of this page but fits on a page."""
    if pdf.h - pdf.b_margin - pdf.get_y() < height < pdf.h - pdf.b_margin - pdf.t_margin:
        pdf.add_page()


def handout_pdf(h: Handout) -> bytes:
    """The handout as PDF bytes: a title page, every step from a new page with its figures as vector art, and a last
    page about the handout."""
    return handout_pdf_layout(h)[0]


def handout_pdf_layout(h: Handout) -> tuple[bytes, list[Placement], list[int]]:
    """`handout_pdf`'s bytes, where each figure went (page, box, the size its smallest text prints at) and the
    pages (0-based) that hold a table of numbers."""
    pdf = HandoutPDF(f"The Tour on {h.run_label}, {h.split} split")
    pdf.set_title(f"{h.title}: the Tour on {h.run_label}")
    pdf.set_creator("scripts/handout.py")
    placements: list[Placement] = []
    table_pages: list[int] = []
    write_title_page(pdf, h)
    for step in h.steps:
        write_step(pdf, step, placements, table_pages)
    write_about_page(pdf, h)
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(bytes(pdf.output()))))
    for p in placements:
        page = writer.pages[p.page]
        figure = PdfReader(io.BytesIO(p.pdf)).pages[0]
        scale = p.w * MM / float(figure.mediabox.width)
        top = float(page.mediabox.height) - p.y * MM
        move = Transformation().scale(scale).translate(p.x * MM, top - float(figure.mediabox.height) * scale)
        page.merge_transformed_page(figure, move)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue(), placements, table_pages
