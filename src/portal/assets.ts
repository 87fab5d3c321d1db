/**
 * The portal's stylesheet and its one small script, served from memory (the CLI is bundled, so
 * there are no files beside it to read). The content security policy allows scripts and styles
 * from the portal itself only; nothing is inline.
 */

export const PORTAL_CSS = `
:root { color-scheme: light; --text: #1b1b1b; --quiet: #4a4a4a; --bg: #ffffff; --panel: #f3f4f6; --line: #8a8f98;
  --accent: #0b4fb3; --accent-text: #ffffff; --danger: #a4161a; --focus: #ffbf47; --ok: #0f5132; --ok-bg: #e8f5ee; --warn-bg: #fff4d6; }
* { box-sizing: border-box; }
html { font-size: 100%; -webkit-text-size-adjust: 100%; }
body { margin: 0; font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; line-height: 1.5; color: var(--text); background: var(--bg); }
.wrap { max-width: 44rem; margin: 0 auto; padding: 0 1rem; }
.skip { position: absolute; left: -999px; top: 0; background: var(--focus); color: #000; padding: .5rem 1rem; z-index: 10; }
.skip:focus { left: 0; }
.top { background: var(--panel); border-bottom: 1px solid var(--line); }
.top-row { display: flex; flex-wrap: wrap; align-items: center; justify-content: space-between; gap: .5rem 1rem; padding-top: .75rem; padding-bottom: .75rem; }
.brand { font-weight: 700; font-size: 1.125rem; color: var(--text); text-decoration: none; }
.who { display: flex; flex-wrap: wrap; align-items: center; gap: .25rem .75rem; font-size: .95rem; }
.who form { margin: 0; }
main { padding-top: 1rem; padding-bottom: 3rem; }
main:focus { outline: none; }
h1 { font-size: 1.75rem; line-height: 1.25; margin: 1rem 0; }
h2 { font-size: 1.25rem; margin: 1.5rem 0 .5rem; }
a { color: var(--accent); text-underline-offset: .15em; }
a:hover { text-decoration-thickness: 2px; }
code, pre, input.secret { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
code { overflow-wrap: anywhere; }
.quiet { color: var(--quiet); }
:focus-visible { outline: 3px solid var(--focus); outline-offset: 2px; box-shadow: 0 0 0 5px #000; }
.button { display: inline-block; min-height: 2.75rem; padding: .6rem 1.1rem; border: 2px solid var(--accent); border-radius: .375rem;
  background: var(--accent); color: var(--accent-text); font: inherit; font-weight: 600; text-decoration: none; cursor: pointer; text-align: center; }
.button:hover { filter: brightness(0.92); }
.button.secondary { background: var(--bg); color: var(--accent); }
.button.danger { background: var(--danger); border-color: var(--danger); color: #fff; }
.link-button { background: none; border: 0; padding: .5rem 0; min-height: 2.75rem; font: inherit; color: var(--accent); text-decoration: underline; cursor: pointer; }
.actions { list-style: none; padding: 0; display: grid; gap: .75rem; }
.actions .button { width: 100%; }
.card { border: 1px solid var(--line); border-radius: .5rem; padding: .25rem 1rem 1rem; margin: 1rem 0; background: var(--bg); }
.card.off { background: var(--panel); }
.card h2 { margin-top: .75rem; }
.bots { list-style: none; padding: 0; margin: 0; }
.tag { display: inline-block; font-size: .8rem; font-weight: 600; padding: .1rem .5rem; border-radius: 1rem; background: #e4e4e7; color: #27272a; vertical-align: middle; }
.facts { margin: 0; display: grid; gap: .5rem; }
.facts div { display: grid; grid-template-columns: minmax(8rem, 11rem) 1fr; gap: .5rem; }
.facts dt { font-weight: 600; }
.facts dd { margin: 0; min-width: 0; }
@media (max-width: 30rem) { .facts div { grid-template-columns: 1fr; gap: 0; } }
.field { margin: 1.25rem 0; }
label { display: block; font-weight: 600; margin-bottom: .25rem; }
.hint { margin: 0 0 .4rem; color: var(--quiet); }
input[type=text], textarea { width: 100%; min-height: 2.75rem; padding: .5rem .6rem; font: inherit; color: var(--text); background: var(--bg);
  border: 2px solid var(--line); border-radius: .25rem; }
input[aria-invalid=true], textarea[aria-invalid=true] { border-color: var(--danger); }
.error { color: var(--danger); font-weight: 600; margin: 0 0 .4rem; }
.error-summary { border: 3px solid var(--danger); padding: .5rem 1rem; margin: 1rem 0; border-radius: .25rem; }
.error-summary h2 { margin-top: .5rem; }
.error-summary a { color: var(--danger); font-weight: 600; }
.notice { background: var(--ok-bg); color: var(--ok); border-left: 5px solid var(--ok); padding: .25rem 1rem; margin: 1rem 0; }
.warning { background: var(--warn-bg); border-left: 5px solid #8a6100; padding: .25rem 1rem; margin: 1rem 0; }
.copy-row { display: flex; gap: .5rem; }
.copy-row input { flex: 1; min-width: 0; }
.example { position: relative; }
pre { background: var(--panel); border: 1px solid var(--line); padding: .75rem; overflow-x: auto; white-space: pre-wrap; word-break: break-all; font-size: .875rem; }
.check { display: flex; gap: .6rem; align-items: flex-start; margin: 1rem 0; }
.check input { width: 1.5rem; height: 1.5rem; margin: 0; flex: none; }
.check label { font-weight: 400; margin: 0; }
.danger-zone { border-color: var(--danger); }
.visually-hidden { position: absolute !important; width: 1px; height: 1px; padding: 0; margin: -1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; border: 0; }
`;

/** Shows the "Copy" buttons (hidden without JavaScript) and copies what they point at. */
export const PORTAL_JS = `
(function () {
  var status = document.getElementById('copy-status');
  function say(text) { if (status) { status.textContent = ''; setTimeout(function () { status.textContent = text; }, 50); } }
  document.querySelectorAll('button[data-copy]').forEach(function (button) {
    button.hidden = false;
    button.addEventListener('click', function () {
      var target = document.getElementById(button.getAttribute('data-copy'));
      if (!target) return;
      var text = 'value' in target ? target.value : target.textContent;
      var done = function () { say('Copied.'); };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(done, function () { fallback(target); });
      } else { fallback(target); }
      function fallback(element) {
        if ('select' in element) { element.select(); } else { var range = document.createRange(); range.selectNodeContents(element); var sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(range); }
        try { document.execCommand('copy'); done(); } catch (e) { say('Press Ctrl+C (or Cmd+C) to copy.'); }
      }
    });
  });
})();
`;
