"""A report page as a real browser renders it: Debian's headless Chromium (scripts/setup --test installs it) loads a
copy of the page with a tiny test-only script, from file:// with no network (a new network namespace when root),
and prints the DOM (--dump-dom); the script writes what it read into the DOM as JSON. A screenshot is kept."""
import html
import json
import os
import re
import shutil
import subprocess

import pytest

BROWSERS = ("chromium-headless-shell", "chromium")
PROBE = """<script>
window.addEventListener("load", function () {
  var text = function (el) { return el ? el.textContent.trim() : null; };
  var rows = Array.from(document.querySelectorAll("#summary tbody tr"));
  var out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify({
    verdict: text(document.querySelector("#verdict h2")),
    facts: text(document.querySelector("#verdict p")),
    checks: rows.map(function (tr) { return Array.from(tr.cells).map(text); }),
    links: Array.from(document.querySelectorAll("#summary a")).map(function (a) {
      return !!document.getElementById(a.getAttribute("href").slice(1)); }),
    sections: Array.from(document.querySelectorAll("section h2")).map(text),
    images: Array.from(document.images).map(function (img) { return [img.alt, img.naturalWidth]; }),
    tables: Array.from(document.querySelectorAll("section table")).map(function (t) {
      return {caption: text(t.caption), headers: Array.from(t.querySelectorAll("th")).map(text),
              rows: Array.from(t.querySelectorAll("tbody tr")).map(function (tr) {
                return Array.from(tr.cells).map(text); })}; }),
    figcaptions: Array.from(document.querySelectorAll("figcaption")).map(text),
    paragraphs: Array.from(document.querySelectorAll("section p")).map(text),
    notes: Array.from(document.querySelectorAll("body > ul > li")).map(text)
  });
  document.body.appendChild(out);
});
</script>"""


def browser():
    found = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if found is None:
        pytest.skip("no headless Chromium: scripts/setup --test installs Debian's chromium-headless-shell")
    return found


def render(page, tmp_path):
    """What the probe read from page as the browser rendered it (a dict); screenshot.png kept in tmp_path."""
    copy = tmp_path / "probed.html"
    copy.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    isolated = ["unshare", "-n"] if os.geteuid() == 0 and shutil.which("unshare") else []
    argv = [*isolated, browser(), "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
            "--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND", "--window-size=1400,2000"]
    done = subprocess.run([*argv, "--dump-dom", copy.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stdout[-2000:] + done.stderr[-2000:]
    shot = subprocess.run([*argv, f"--screenshot={tmp_path / 'screenshot.png'}", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0 and (tmp_path / "screenshot.png").stat().st_size > 0, shot.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))
