"""How the HTML handout (app/tour/handout.py) looks and moves: its style sheet and its small script, inlined into
the file so that it needs no server and no network.

Three ways to read one file: as a handout (every step below the other; printing puts one step on a page), as
slides (the Slides button, or the file opened at #slide-N: one step a screen, sized for a 1024x768 projector; arrow keys
or the buttons move),
and with "Predict, then reveal" on (each step's measurement, verdict and figures stay hidden until its Reveal
button, or the R key, is pressed).
"""

HANDOUT_CSS = """
:root { --ink: #1f2328; --muted: #57606a; --line: #d0d7de; --agrees: #1a7f37; --partly: #b35900;
        --does-not: #cf222e; --not-tested: #6e7781; }
* { box-sizing: border-box; }
body { font-family: "Source Sans Pro", "Helvetica Neue", Arial, sans-serif; color: var(--ink); margin: 0 auto;
       max-width: 980px; padding: 0 1.2rem 3rem; line-height: 1.45; font-size: 16px; }
h1 { font-size: 2rem; margin: 1.2rem 0 0.3rem; } h2 { font-size: 1.45rem; margin: 0 0 0.4rem; }
h4 { margin: 0.6rem 0 0.2rem; font-size: 1rem; }
.controls { position: sticky; top: 0; z-index: 2; background: #fff; border-bottom: 1px solid var(--line);
            padding: 0.4rem 0; display: flex; gap: 1rem; align-items: center; }
.controls button, .reveal-button { font: inherit; padding: 0.25rem 0.8rem; border: 1px solid var(--line);
            border-radius: 0.4rem; background: #f6f8fa; cursor: pointer; }
.slide-nav { display: none; margin-left: auto; gap: 0.6rem; align-items: center; }
section.step { border-bottom: 1px solid var(--line); padding: 1.2rem 0; display: grid;
               grid-template-columns: minmax(0, 2fr) minmax(0, 3fr); gap: 0 1.4rem; }
section.step > * { grid-column: 1; }
section.step > .figures { grid-column: 2; grid-row: 1 / span 20; }
section.title-page { display: block; }
.subtitle, .how, .question, figcaption, .terms, .note { color: var(--muted); }
.question { font-style: italic; margin-top: 0; }
.predict { border-left: 4px solid #0969da; background: #f3f8ff; padding: 0.3rem 0.8rem; margin: 0.5rem 0; }
.predict p { margin: 0.2rem 0; } .predict ol { margin: 0.2rem 0 0.3rem; padding-left: 1.6rem; }
.verdict { display: inline-block; font-weight: 600; color: #fff; border-radius: 0.35rem;
           padding: 0.05rem 0.55rem; margin: 0.2rem 0; }
.verdict-agrees { background: var(--agrees); } .verdict-partly { background: var(--partly); }
.verdict-does-not { background: var(--does-not); } .verdict-not-tested { background: var(--not-tested); }
.verdict-does-not-apply { background: #8c959f; }
.measured { font-size: 0.92rem; } .measured p { margin: 0.2rem 0; }
summary { color: var(--muted); cursor: pointer; } details.folded summary { font-weight: 600; margin: 0.3rem 0; }
.note { font-size: 0.9rem; } .missing { background: #fff8c5; padding: 0.4rem; }
figure { margin: 0 0 1rem; } figure svg { max-width: 100%; height: auto; display: block; }
figcaption { font-size: 0.88rem; }
table { border-collapse: collapse; font-size: 0.9rem; margin: 0.3rem 0; }
th, td { border: 1px solid var(--line); padding: 0.15rem 0.45rem; text-align: left; vertical-align: top; }
.facts th { white-space: nowrap; background: #f6f8fa; }
.terms { font-size: 0.85rem; margin: 0.6rem 0 0; } .terms dt { font-weight: 600; } .terms dd { margin: 0 0 0.3rem; }
.reveal-button { display: none; margin: 0.4rem 0; background: #0969da; color: #fff; border-color: #0969da; }
body.reveal-mode section.step:not(.is-revealed) .revealed { display: none; }
body.reveal-mode section.step:not(.is-revealed) .reveal-button { display: inline-block; }
body.slides { max-width: none; padding: 0 1rem; font-size: 16px; }
body.slides .slide-nav { display: flex; }
body.slides section.step { display: none; border: 0; min-height: calc(100vh - 3rem); padding: 0.6rem 0; }
body.slides section.step.current { display: grid; }
body.slides section.title-page.current { display: block; }
body.slides .controls { position: static; }
body.slides figure svg { max-height: calc(100vh - 12rem); width: auto; max-width: 100%; }
body.slides .measured, body.slides figcaption { font-size: 0.8rem; }
body.slides .terms { font-size: 0.75rem; } body.slides .terms dd { margin-bottom: 0.1rem; }
body.slides .question, body.slides .paper, body.slides .headline { margin: 0.3rem 0; }
body.slides h2 { font-size: 1.35rem; } body.slides .predict ol { margin-bottom: 0; }
@media (max-width: 760px) { section.step > .figures { grid-column: 1; grid-row: auto; } }
@media print {
  .controls, .reveal-button { display: none !important; }
  body, body.slides { max-width: none; font-size: 11pt; }
  section.step, body.slides section.step { display: grid !important; break-before: page; border: 0;
                                           min-height: 0; }
  section.title-page { display: block !important; break-before: auto; }
  .revealed { display: block !important; }
}
"""

HANDOUT_SCRIPT = """
(function () {
  var body = document.body;
  var steps = Array.prototype.slice.call(document.querySelectorAll("section.step"));
  var current = 0;
  function show(n) {
    current = Math.max(0, Math.min(steps.length - 1, n));
    steps.forEach(function (s, k) { s.classList.toggle("current", k === current); });
    document.getElementById("position").textContent =
      current === 0 ? "Title" : "Step " + current + " of " + (steps.length - 1);
    if (body.classList.contains("slides")) { history.replaceState(null, "", "#slide-" + current); }
  }
  function fromHash() {
    var k = parseInt(location.hash.replace("#slide-", ""), 10);
    return isNaN(k) ? 0 : k;
  }
  function openNumbers(open) {
    document.querySelectorAll("details").forEach(function (d) { d.open = open; });
  }
  function slides(on) {
    body.classList.toggle("slides", on);
    openNumbers(!on);
    document.getElementById("slides-button").textContent = on ? "Handout" : "Slides";
    show(on ? fromHash() : current);
    if (on) { window.scrollTo(0, 0); } else { steps[current].scrollIntoView(); }
  }
  function reveal(section) { section.classList.add("is-revealed"); }
  document.getElementById("slides-button").addEventListener("click", function () {
    slides(!body.classList.contains("slides"));
  });
  document.getElementById("reveal-mode").addEventListener("change", function (e) {
    body.classList.toggle("reveal-mode", e.target.checked);
    steps.forEach(function (s) { s.classList.remove("is-revealed"); });
    e.target.blur();  // the keys (arrows, R) go on working after the tick, without a click elsewhere
  });
  document.getElementById("prev").addEventListener("click", function () { show(current - 1); });
  document.getElementById("next").addEventListener("click", function () { show(current + 1); });
  steps.forEach(function (s) {
    var b = s.querySelector(".reveal-button");
    if (b) { b.addEventListener("click", function () { reveal(s); }); }
  });
  document.addEventListener("keydown", function (e) {
    if (e.target.tagName === "INPUT" && e.target.type !== "checkbox") { return; }
    if (e.key === "s") { slides(!body.classList.contains("slides")); }
    if (!body.classList.contains("slides")) { return; }
    if (e.key === "ArrowRight" || e.key === "PageDown" || e.key === " ") { show(current + 1); e.preventDefault(); }
    if (e.key === "ArrowLeft" || e.key === "PageUp") { show(current - 1); e.preventDefault(); }
    if (e.key === "r") { reveal(steps[current]); }
  });
  window.addEventListener("beforeprint", function () {
    steps.forEach(reveal);
    openNumbers(true);
  });
  if (location.hash.indexOf("#slide-") === 0) { slides(true); } else { show(0); }
})();
"""
