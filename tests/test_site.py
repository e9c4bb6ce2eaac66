"""The published asv site renders offline in a real browser (headless Chromium).

Publishes the committed results/ into a temporary folder, serves it on localhost,
and checks in Chromium that the benchmark grid lists the suites and that a graph
is drawn with points. Screenshots go to .asv/site-check/ (ignored).
"""

import functools
import http.server
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from once_per_run import once_per_run

from flashbench.site import publish

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / ".asv" / "site-check"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory, worker_id):
    """(the site's URL, its folder): the committed results published once a test run
    (tests/once_per_run.py: its two tests, on two workers, each published it: 2-3 s of CPU
    a time), served by each worker that asks; the tests only read it."""
    def run():
        if worker_id == "master":
            html = tmp_path_factory.mktemp("html")
        else:  # beside the workers' own temp folders: the run's, read by every worker
            html = tmp_path_factory.getbasetemp().parent / "site" / "html"
        return str(publish(config=str(ROOT / "asv.conf.json"), html_dir=str(html)))

    html = Path(once_per_run(tmp_path_factory, worker_id, "site-html", run))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(html))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", html
    server.shutdown()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not (chromium and driver_path):
        pytest.fail("headless Chromium is required: apt-get install chromium chromium-driver "
                    "(scripts/test.sh does this)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--window-size=1400,1000",
                 f"--user-data-dir={tmp_path_factory.mktemp('chrome-profile')}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(options=opts, service=Service(driver_path))
    yield driver
    driver.quit()


def wait_for(driver, script, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.25)
    return driver.execute_script(script)


def test_offline_site_has_no_cdn_references(site):
    _, html = site
    text = (html / "index.html").read_text()
    assert "cdnjs" not in text and "cdn.jsdelivr" not in text and "code.jquery" not in text
    assert (html / "vendor" / "jquery" / "dist" / "jquery.min.js").exists()


def test_benchmark_grid_and_a_graph_with_points_render(site, browser):
    url, _ = site
    SHOTS.mkdir(parents=True, exist_ok=True)
    browser.get(url)
    names = wait_for(browser, "return $('.benchmark-plot').map(function(){return this.id}).get()"
                     ".filter(function(x){return x.length > 0});")
    browser.save_screenshot(str(SHOTS / "index.png"))
    body = browser.find_element("tag name", "body").text
    assert "failed to load" not in body
    assert any("TimeAttention" in n for n in names), names
    memory = [n for n in names if "PeakmemAttention" in n]  # peakmem_ before, a track now
    assert memory, names
    assert any("TrackAccuracy" in n for n in names)

    # grid cells are ids "summarygrid-<benchmark>"; the graph page is "#<benchmark>"
    browser.get(url + "#" + memory[0].removeprefix("summarygrid-"))
    points = wait_for(browser, """
        var p = $('#main-graph').data('plot');
        if (!p) return 0;
        return p.getData().reduce(function(n, s){ return n + s.data.length; }, 0);""")
    browser.save_screenshot(str(SHOTS / "graph.png"))
    assert points >= 1, "no points plotted"

    # the filter panel offers what a user chooses between (failed before: three OS builds
    # and three RAM figures were choices; sdpa-efficient / sdpa-cudnn, never run on these
    # CPU-only machines, were offered as kernels)
    browser.get(url + "#bench_accuracy.TrackAccuracy.track_o_max_abs")
    panels = wait_for(browser, """
        var p = {};
        $('.panel-heading').each(function(){
            p[$(this).text()] = $(this).next().find('.btn').map(function(){
                return $(this).text().trim()}).get();});
        return p.kernel ? p : null;""")
    browser.save_screenshot(str(SHOTS / "filters.png"))
    assert panels and "machine" in panels and "dtype" in panels, panels
    assert not {"os", "ram", "num_cpu", "arch"} & set(panels), sorted(panels)
    assert not any(v.startswith("Linux") for v in sum(panels.values(), [])), panels
    kernels = " ".join(panels["kernel"])
    assert "flash_model" in kernels and "triton" in kernels
    assert "sdpa-efficient" not in kernels and "sdpa-cudnn" not in kernels, kernels


def few_results(where: Path, files: int = 3) -> Path:
    """An asv configuration of this repository whose results folder holds the newest
    ``files`` committed results files of one machine (a site in a third of the CPU of
    the whole history's; the races below do not depend on its size)."""
    from flashbench.infra.asv import read_config

    machine = max((ROOT / "results").glob("*/machine.json")).parent
    newest = sorted((p for p in machine.glob("*.json") if p.name != "machine.json"),
                    key=lambda p: json.loads(p.read_text())["date"])[-files:]
    results = where / "results" / machine.name
    results.mkdir(parents=True)
    shutil.copy(ROOT / "results" / "benchmarks.json", results.parent)
    for path in [machine / "machine.json", *newest]:
        shutil.copy(path, results)
    conf = read_config(ROOT / "asv.conf.json") | {"repo": str(ROOT),
                                                 "results_dir": str(results.parent)}
    (where / "asv.conf.json").write_text(json.dumps(conf))
    return where / "asv.conf.json"


def test_concurrent_publishes_both_succeed(tmp_path):
    """Issue 16 item 17: two ``python -m flashbench.site`` at once into one folder."""
    html = tmp_path / "site"
    config = few_results(tmp_path / "project")
    cmd = [sys.executable, "-m", "flashbench.site", "--config", str(config),
           "--html-dir", str(html)]
    procs = [subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert (html / "index.html").is_file() and (html / "vendor" / "jquery").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["project", "site"]  # no build left
    graphs = list((html / "graphs").rglob("*.json"))
    assert len(graphs) > 10, "the site holds the results' graphs"
    assert not [p for p in (ROOT / ".asv" / "vendor").iterdir() if p.name.startswith(".")]


def test_asv_publish_failure_shows_asvs_own_error(tmp_path):
    conf = tmp_path / "asv.conf.json"
    conf.write_text('{"version": 1, "project": "x", "repo": ".", "results_dir": "nope", '
                    '"html_dir": "html"}')
    r = subprocess.run([sys.executable, "-m", "flashbench.site", "--config", str(conf)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 3, r
    assert "asv publish failed" in r.stderr and "Can not determine what kind of DVCS" in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["asv.conf.json"]
