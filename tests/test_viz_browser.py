"""`gcompile viz` pages in a real browser (headless Chromium): a ~300-node double-backward graph loads
without console errors and is readable at the page's natural size, measured on what Chromium laid
out: no two boxes overlap, no edge passes through a box it does not connect, every label is at
least 10 px and fits in its box, the drawing is shown unscaled and its aspect ratio is bounded.
A screenshot of the page is taken too (look at it: tests/test_viz_browser.py's tmp folder).

Chromium comes from Debian's `chromium` package (.ci/run installs it). Without it this test fails
when GCOMPILE_REQUIRE_BROWSER is set, as in CI, and is skipped with the reason otherwise.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import textwrap

import pytest
from click.testing import CliRunner

from gcompile.cli import main

MODEL = textwrap.dedent("""
    import numpy as np
    import gcompile as gc
    import gcompile.functions as F

    rng = np.random.default_rng(0)
    WIDTH = 32
    SHAPES = [(16, WIDTH)] + [(WIDTH, WIDTH)] * 6 + [(WIDTH, 1)]
    W = {f"w{i}": (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for i, s in enumerate(SHAPES)}

    def critic(x, ws):
        h = x
        for i, w in enumerate(ws[:-1]):
            h = F.tanh(h @ w)
            if i % 2:
                h = F.layer_norm(h, np.ones(WIDTH, np.float32), np.zeros(WIDTH, np.float32))
        return h @ ws[-1]

    @gc.export(x=gc.spec(("batch", 16)), **W)
    def penalty_grads(x, w0, w1, w2, w3, w4, w5, w6, w7):
        '''WGAN-GP: the gradient penalty's gradient w.r.t. the critic's weights (second order).'''
        ws = [w0, w1, w2, w3, w4, w5, w6, w7]
        gx, = gc.grad(F.sum(critic(x, ws)), [x])
        penalty = F.mean((F.sqrt(F.sum(gx * gx, axis=1) + 1e-12) - 1) ** 2)
        return {"penalty": penalty, "grads": gc.grad(penalty, ws)}
""")
MIN_FONT_PX = 10
MAX_ASPECT = 8      # height / width (and width / height) of the drawing

# Measures what Chromium laid out, in CSS pixels, and leaves the result on <body data-probe>.
PROBE = """
<script>
(function () {
  const out = {boxes: 0, edges: 0, overlaps: [], through: [], small: [], overflow: [], svgs: []};
  const boxes = [];
  document.querySelectorAll("g.node[data-key]").forEach(g => {
    const r = g.querySelector("rect").getBoundingClientRect();
    boxes.push({key: g.dataset.key, l: r.left, t: r.top, r: r.right, b: r.bottom});
    g.querySelectorAll("text").forEach(t => {
      const size = parseFloat(getComputedStyle(t).fontSize);
      if (size < MIN_FONT_PX) out.small.push([g.dataset.key, t.textContent, size]);
      const tr = t.getBoundingClientRect();
      if (tr.width > 0 && (tr.left < r.left - 0.5 || tr.right > r.right + 0.5 || tr.top < r.top - 0.5 ||
                           tr.bottom > r.bottom + 0.5)) out.overflow.push([g.dataset.key, t.textContent]);
    });
  });
  out.boxes = boxes.length;
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const a = boxes[i], b = boxes[j];
    if (a.l < b.r - 0.5 && b.l < a.r - 0.5 && a.t < b.b - 0.5 && b.t < a.b - 0.5) out.overlaps.push([a.key, b.key]);
  }
  const CELL = 64, grid = new Map();           // boxes by 64 px cells, to test each sample against few
  boxes.forEach(b => {
    for (let cx = Math.floor(b.l / CELL); cx <= Math.floor(b.r / CELL); cx++)
      for (let cy = Math.floor(b.t / CELL); cy <= Math.floor(b.b / CELL); cy++) {
        const k = cx + "," + cy;
        if (!grid.has(k)) grid.set(k, []);
        grid.get(k).push(b);
      }
  });
  document.querySelectorAll("g.wire").forEach(w => {
    out.edges++;
    const path = w.querySelector("path.edge"), m = path.getScreenCTM();
    const own = new Set([w.dataset.from, w.dataset.to]);
    const samples = [];                         // points along the path's own segments (M, C and L)
    const tokens = path.getAttribute("d").match(/[MCL]|-?[0-9.]+/g);
    let x0 = 0, y0 = 0, i = 0, op = "M";
    while (i < tokens.length) {
      if ("MCL".includes(tokens[i])) op = tokens[i++];
      const n = op === "C" ? 6 : 2, v = tokens.slice(i, i + n).map(Number);
      i += n;
      if (op === "C") {
        for (let k = 1; k <= 32; k++) {
          const t = k / 32, u = 1 - t;
          samples.push([u*u*u*x0 + 3*u*u*t*v[0] + 3*u*t*t*v[2] + t*t*t*v[4],
                        u*u*u*y0 + 3*u*u*t*v[1] + 3*u*t*t*v[3] + t*t*t*v[5]]);
        }
      } else if (op === "L") {
        const steps = Math.max(1, Math.ceil(Math.hypot(v[0] - x0, v[1] - y0) / 3));
        for (let k = 1; k <= steps; k++) samples.push([x0 + (v[0] - x0) * k / steps, y0 + (v[1] - y0) * k / steps]);
      }
      x0 = v[n - 2]; y0 = v[n - 1];
    }
    for (const [px, py] of samples) {
      const x = m.a * px + m.c * py + m.e, y = m.b * px + m.d * py + m.f;
      const near = grid.get(Math.floor(x / CELL) + "," + Math.floor(y / CELL)) || [];
      const hit = near.find(b => !own.has(b.key) && x > b.l + 1 && x < b.r - 1 && y > b.t + 1 && y < b.b - 1);
      if (hit) { out.through.push([w.dataset.from, w.dataset.to, hit.key]); break; }
    }
  });
  document.querySelectorAll("svg").forEach(svg => {
    const r = svg.getBoundingClientRect();
    out.svgs.push({width: +svg.getAttribute("width"), height: +svg.getAttribute("height"), shown: r.width});
  });
  document.body.setAttribute("data-probe", JSON.stringify(out));
})();
</script>
""".replace("MIN_FONT_PX", str(MIN_FONT_PX))


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    reason = "headless Chromium is not installed (Debian: apt-get install -y chromium)"
    if os.environ.get("GCOMPILE_REQUIRE_BROWSER"):
        pytest.fail(f"{reason}, and GCOMPILE_REQUIRE_BROWSER is set")
    pytest.skip(f"{reason}; set GCOMPILE_REQUIRE_BROWSER=1 to make this a failure")


def _browse(browser, profile, url, *args):
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args, url],
                          capture_output=True, text=True, timeout=180)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    browser = chromium()
    folder = tmp_path_factory.mktemp("viz_browser")
    (folder / "model.py").write_text(MODEL)
    result = CliRunner().invoke(main, ["viz", str(folder / "model.py"), "-o", str(folder / "graph.html")])
    assert result.exit_code == 0, result.output
    nodes = int(re.search(r"\((\d+) nodes", result.output).group(1))
    return browser, folder, nodes


def test_a_300_node_double_backward_page_loads_cleanly_and_reads_well(page):
    browser, folder, nodes = page
    assert 280 <= nodes <= 340, nodes
    html = (folder / "graph.html").read_text()
    assert "order-2" in html and "unk__" not in html and "float32(batch, 32)" in html

    loaded = _browse(browser, folder / "profile", (folder / "graph.html").as_uri(), "--window-size=1600,1200",
                     f"--screenshot={folder / 'graph.png'}")
    assert loaded.returncode == 0, loaded.stderr
    console = [line for line in loaded.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, console                                       # the page has no scripts: any line is an error
    png = (folder / "graph.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24]) == (1600, 1200)

    (folder / "probe.html").write_text(html.replace("</body>", PROBE + "</body>"))
    probed = _browse(browser, folder / "profile", (folder / "probe.html").as_uri(), "--window-size=1600,1200",
                     "--dump-dom")
    assert probed.returncode == 0, probed.stderr
    found = re.search(r'data-probe="([^"]*)"', probed.stdout)
    assert found, probed.stdout[-2000:]
    out = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert out["boxes"] >= nodes and out["edges"] >= nodes
    assert out["overlaps"] == [], out["overlaps"][:5]
    assert out["through"] == [], out["through"][:5]
    assert out["small"] == [], out["small"][:5]
    assert out["overflow"] == [], out["overflow"][:5]
    (svg,) = out["svgs"]
    assert abs(svg["shown"] - svg["width"]) < 1                        # drawn at its natural size, not shrunk
    assert 1 / MAX_ASPECT <= svg["height"] / svg["width"] <= MAX_ASPECT, svg
