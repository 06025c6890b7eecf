"""How the HTML handout (app/tour/handout.py) looks and moves: its style sheet and its small script, inlined into
the file so that it needs no server and no network.

Three ways to read one file: as a handout (every step below the other; printing puts one step on a page), as
slides (the Slides button, or the file opened at #slide-N: one step a screen in presentation mode's type, text at
least 16 px and figures drawn in the dashboard's presentation sizes; a step taller than the screen is shown in parts,
its words, then its figures, as many to a part as the screen holds; arrow keys or the buttons move), and with
"Predict, then reveal" on (each step's measurement, verdict and figures stay hidden until its Reveal button, or the
R key, is pressed). No click leaves the keys without effect: buttons and the switch give up the focus.
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
.projector-size { display: none; }
section.about { border-top: 1px solid var(--line); padding: 1.2rem 0; }
body.slides { max-width: none; padding: 0 1rem; font-size: 18px; line-height: 1.35; }
body.slides .slide-nav { display: flex; }
body.slides section.step { display: none; border: 0; min-height: calc(100vh - 3rem); padding: 0.6rem 0; }
body.slides section.step.current { display: grid; }
body.slides section.title-page.current { display: block; }
body.slides section.about { display: none; }
body.slides .controls { position: static; }
body.slides .print-size { display: none; } body.slides .projector-size { display: block; }
body.slides figure svg { max-height: calc(100vh - 9rem); width: auto; max-width: 100%; }
body.slides .measured, body.slides figcaption, body.slides .terms, body.slides .note, body.slides table,
body.slides summary { font-size: 16px; }
body.slides .terms dd { margin-bottom: 0.1rem; }
body.slides .question, body.slides .paper, body.slides .headline { margin: 0.3rem 0; }
body.slides h2 { font-size: 1.5rem; } body.slides .predict ol { margin-bottom: 0; }
/* a step taller than the screen is shown in parts, one column, each part within the screen (the script plans them) */
body.slides section.step.split { grid-template-columns: minmax(0, 1fr); }
body.slides section.step.split > .figures { grid-column: 1; grid-row: auto; }
body.slides section.step.split .block.off, body.slides section.step.split .figures.off { display: none; }
.slide-verdict { display: none; margin: 0.2rem 0 0.4rem; }
body.slides section.step.split > .block.words.off ~ .figures .slide-verdict { display: block; }
@media (max-width: 760px) { section.step > .figures { grid-column: 1; grid-row: auto; } }
@media print {
  .controls, .reveal-button, .projector-size { display: none !important; }
  .print-size { display: block !important; }
  section.about, body.slides section.about { display: block !important; break-before: page; }
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
  var current = 0, part = 0, parts = [null];
  function blocksOf(el) { return Array.prototype.slice.call(el.querySelectorAll(".block")); }
  function fits() { return document.documentElement.scrollHeight <= window.innerHeight + 1; }
  function layout(s, shown, shrink) {  // shown: the blocks of one part, or null for the whole step
    s.classList.toggle("split", shown !== null);
    blocksOf(s).forEach(function (b) { b.classList.toggle("off", shown !== null && shown.indexOf(b) < 0); });
    s.querySelectorAll(".figures").forEach(function (box) {  // a box none of whose blocks is shown
      box.classList.toggle("off", shown !== null &&
        !blocksOf(box).some(function (b) { return shown.indexOf(b) >= 0; }));
    });
    s.querySelectorAll("svg").forEach(function (svg) { svg.style.maxHeight = ""; });
    if (shrink && shown !== null && !fits()) {  // one figure taller than the screen's room: drawn smaller to fit
      var drawn = Array.prototype.filter.call(s.querySelectorAll(".projector-size svg"),
        function (svg) { return svg.getClientRects().length > 0; });
      var over = document.documentElement.scrollHeight - window.innerHeight;
      if (drawn.length === 1) {
        drawn[0].style.maxHeight = Math.max(120, drawn[0].getBoundingClientRect().height - over - 2) + "px";
      }
    }
  }
  function plan(s) {  // the whole step when it fits the screen, else its blocks in order, as many a part as fit
    layout(s, null);
    if (fits()) { return [null]; }
    var visible = blocksOf(s).filter(function (b) { return b.getClientRects().length > 0; });
    var groups = [], group = [];
    visible.forEach(function (b) {
      layout(s, group.concat([b]));
      if (group.length && !fits()) { groups.push(group); group = [b]; } else { group.push(b); }
    });
    if (group.length) { groups.push(group); }
    return groups.length ? groups : [null];
  }
  function label() {
    var where = current === 0 ? "Title" : "Step " + current + " of " + (steps.length - 1);
    if (parts.length > 1) { where += " (" + (part + 1) + "/" + parts.length + ")"; }
    document.getElementById("position").textContent = where;
  }
  function show(n, atEnd) {
    current = Math.max(0, Math.min(steps.length - 1, n));
    steps.forEach(function (s, k) { s.classList.toggle("current", k === current); });
    if (body.classList.contains("slides")) {
      parts = plan(steps[current]);
      part = atEnd ? parts.length - 1 : 0;
      layout(steps[current], parts[part], true);
      history.replaceState(null, "", "#slide-" + current);
    } else {
      parts = [null]; part = 0;
    }
    label();
  }
  function forward() {
    if (part < parts.length - 1) { part += 1; layout(steps[current], parts[part], true); label(); }
    else if (current < steps.length - 1) { show(current + 1); }
  }
  function backward() {
    if (part > 0) { part -= 1; layout(steps[current], parts[part], true); label(); }
    else if (current > 0) { show(current - 1, true); }
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
    if (!on) { steps.forEach(function (s) { layout(s, null); }); }
    show(on ? fromHash() : current);
    if (on) { window.scrollTo(0, 0); } else { steps[current].scrollIntoView(); }
  }
  function reveal(section) {
    section.classList.add("is-revealed");
    if (body.classList.contains("slides") && section === steps[current]) { show(current); }  // plan it again
  }
  document.getElementById("slides-button").addEventListener("click", function (e) {
    slides(!body.classList.contains("slides"));
    e.target.blur();  // the keys go on working after the click
  });
  document.getElementById("reveal-mode").addEventListener("change", function (e) {
    body.classList.toggle("reveal-mode", e.target.checked);
    steps.forEach(function (s) { s.classList.remove("is-revealed"); });
    e.target.blur();  // the keys (arrows, R) go on working after the tick, without a click elsewhere
    show(current);
  });
  document.getElementById("prev").addEventListener("click", function (e) { backward(); e.target.blur(); });
  document.getElementById("next").addEventListener("click", function (e) { forward(); e.target.blur(); });
  steps.forEach(function (s) {
    var b = s.querySelector(".reveal-button");
    if (b) { b.addEventListener("click", function () { b.blur(); reveal(s); }); }
  });
  document.addEventListener("keydown", function (e) {
    if (e.target.tagName === "INPUT" && e.target.type !== "checkbox") { return; }
    if (e.key === "s") { slides(!body.classList.contains("slides")); }
    if (!body.classList.contains("slides")) { return; }
    if (e.key === "ArrowRight" || e.key === "PageDown" || e.key === " ") { forward(); e.preventDefault(); }
    if (e.key === "ArrowLeft" || e.key === "PageUp") { backward(); e.preventDefault(); }
    if (e.key === "r") { reveal(steps[current]); }
    if (e.key === "Home") { show(0); e.preventDefault(); }
    if (e.key === "End") { show(steps.length - 1, true); e.preventDefault(); }
  });
  function replan() {  // the screen changed (fullscreen, another window size) or a folded part opened: same place
    if (!body.classList.contains("slides")) { return; }
    var at = part;
    parts = plan(steps[current]);
    part = Math.min(at, parts.length - 1);
    layout(steps[current], parts[part], true);
    label();
  }
  window.addEventListener("resize", replan);
  document.querySelectorAll("details").forEach(function (d) { d.addEventListener("toggle", replan); });
  window.addEventListener("afterprint", function () { show(current); });
  window.addEventListener("beforeprint", function () {
    steps.forEach(function (s) { s.classList.add("is-revealed"); layout(s, null); });
    openNumbers(true);
  });
  if (location.hash.indexOf("#slide-") === 0) { slides(true); } else { show(0); }
})();
"""
