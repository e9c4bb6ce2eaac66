"""The asv HTML site, made to work offline.

``asv publish`` writes pages that load jQuery, flot, bootstrap, blueimp-md5, stupidtable
and flot-orderbars from CDNs; offline (CI, air-gapped GPU clusters; asv issue 669) they
show only "external (JavaScript) dependencies failed to load". :func:`publish` runs
``asv publish``, copies those npm packages (fetched once with ``npm pack`` into a cache
folder, never committed) into ``<html_dir>/vendor/`` and points every CDN reference at
them (the CDN integrity hashes do not match npm's builds, so they are dropped).
``python -m flashbench.site [--html-dir DIR] [--last N]`` prints the folder; ``--last N``:
the last N commits of each branch only (:mod:`.window`). Concurrent runs are safe: each
publishes into a private folder swapped into place under a lock (the last one wins); the
cache is filled under its own lock. A failing ``asv publish`` is a :class:`PublishError`
carrying its own last words; ``main`` prints one line and exits 3 (2 for bad arguments,
a missing or unreadable ``--config`` among them).
More: docs/asv.md ("The offline site").
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from flashbench.infra.asv import last_words, read_config
from flashbench.infra.locks import locked
from flashbench.site.view import view_config
from flashbench.site.window import WindowError, window_config

PACKAGES = ["jquery@3.3.1", "flot@0.8.3", "bootstrap@3.1.1", "blueimp-md5@2.19.0",
            "stupid-table-plugin@1.1.3", "flot-orderbars@1.0.0"]
# CDN file name (last URL component) -> file inside the npm packages (package/... stripped)
LOCAL = {
    "jquery-3.3.1.min.js": "jquery/dist/jquery.min.js",
    "jquery.flot.min.js": "flot/jquery.flot.js",
    "jquery.flot.time.min.js": "flot/jquery.flot.time.js",
    "jquery.flot.selection.min.js": "flot/jquery.flot.selection.js",
    "jquery.flot.categories.min.js": "flot/jquery.flot.categories.js",
    "jquery.flot.orderBars.js": "flot-orderbars/js/jquery.flot.orderBars.js",
    "stupidtable.min.js": "stupid-table-plugin/stupidtable.min.js",
    "md5.min.js": "blueimp-md5/js/md5.min.js",
    "bootstrap.min.js": "bootstrap/dist/js/bootstrap.min.js",
    "bootstrap.min.css": "bootstrap/dist/css/bootstrap.min.css",
}
CACHE = Path(".asv/vendor")
_TAG = re.compile(r'<(script|link)\b([^>]*?)\b(src|href)="(https?://[^"]+)"([^>]*)>')


class PublishError(RuntimeError):
    """asv publish or npm failed; the message carries the tool's own error."""


def fetch_vendor(cache: Path = CACHE) -> Path:
    """npm-pack the packages into ``cache`` (once) and unpack them; returns the folder."""
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    with locked(cache):  # the folder itself: no lock file
        for spec in PACKAGES:
            name = spec.rsplit("@", 1)[0]
            target = cache / name
            if target.exists():
                continue
            if shutil.which("npm") is None:
                raise PublishError("npm is needed once to fetch the site's JavaScript packages")
            work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache))
            try:
                out = subprocess.run(["npm", "pack", spec, "--silent"], cwd=work,
                                     capture_output=True, text=True)
                if out.returncode != 0:
                    raise PublishError(f"npm pack {spec} failed: "
                                       f"{last_words(out.stderr + out.stdout)}")
                tgz = work / out.stdout.strip().splitlines()[-1]
                with tarfile.open(tgz) as tar:
                    tar.extractall(work / "unpacked", filter="data")
                (work / "unpacked" / "package").rename(target)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return cache


def localize(html_dir: Path, cache: Path = CACHE) -> int:
    """Copy the vendor files into html_dir/vendor and point every page at them.

    Returns how many CDN references were rewritten; raises if one is unknown.
    """
    vendor = html_dir / "vendor"
    if vendor.exists():
        shutil.rmtree(vendor)
    for name in {p.split("/", 1)[0] for p in LOCAL.values()}:
        shutil.copytree(cache / name, vendor / name)
    count = 0

    def swap(m: re.Match) -> str:
        nonlocal count
        tag, before, attr, url, after = m.groups()
        base = url.rsplit("/", 1)[-1]
        if base not in LOCAL:
            return m.group(0)  # not a dependency (for example a link to asv's homepage)
        count += 1
        rest = re.sub(r'\s(integrity|crossorigin|referrerpolicy)="[^"]*"', "", before + after)
        return f'<{tag}{rest} {attr}="vendor/{LOCAL[base]}">'.replace("  ", " ")

    for page in html_dir.glob("*.html"):
        text = page.read_text()
        page.write_text(_TAG.sub(swap, text))
    return count


def _config(config: str) -> dict:
    try:
        return read_config(config)
    except ValueError as exc:
        raise PublishError(f"cannot read the asv configuration: {exc}") from None


def _html_dir(config: str, conf: dict) -> Path:
    return (Path(config).resolve().parent / conf.get("html_dir", "html")).resolve()


def publish(config: str = "asv.conf.json", html_dir: str | None = None,
            last: int | None = None) -> Path:
    """``asv publish`` (into ``html_dir``, default the config's; of the last ``last``
    commits of each branch, default all) from the site's view of the results
    (:mod:`.view`: no OS build or RAM choices, no never-measured parameter values), then
    :func:`localize`; returns the folder. The site is built in a private folder and
    swapped into place."""
    if last is not None and (isinstance(last, bool) or not isinstance(last, int) or last < 1):
        raise ValueError(f"last must be a positive whole number of commits, not {last!r}")
    conf = _config(config)
    out = Path(html_dir).resolve() if html_dir else _html_dir(config, conf)
    out.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{out.name}-build-", dir=out.parent))
    work = None
    try:
        work = Path(tempfile.mkdtemp(prefix=f".{out.name}-view-", dir=out.parent))
        source, spec = Path(config).resolve(), None
        if last is not None:
            (work / "window").mkdir()
            source, spec, files = window_config(source, conf, last, work / "window")
            if not files:  # a site with no graph, said (a probe: exit 0, nothing said)
                print(f"python -m flashbench.site: warning: no results in the last {last} "
                      "commits of any branch: the site has no graphs (--last all, or a "
                      "larger --last)", file=sys.stderr)
        view = view_config(source, _config(str(source)), work / "view")
        cmd = [sys.executable, "-m", "asv", "publish", "--config", str(view),
               *([spec] if spec else [])]
        r = subprocess.run([*cmd, "--html-dir", str(build)], capture_output=True, text=True)
        if r.returncode != 0:
            raise PublishError(f"asv publish failed (exit {r.returncode}): "
                               f"{last_words(r.stderr + r.stdout)}")
        if localize(build, fetch_vendor()) == 0:
            raise PublishError(f"no CDN reference found to localise in {out}/*.html")
        with locked(out.parent):
            old = None
            if out.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{out.name}-old-", dir=out.parent))
                os.rename(out, old / "site")
            os.rename(build, out)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(build, ignore_errors=True)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
    return out


def _last(text: str) -> int | None:
    from flashbench.infra.args import positive_int

    return None if text == "all" else positive_int(text)


def main(argv=None) -> int:
    from flashbench.infra.args import Parser  # one line of error for bad arguments

    p = Parser(prog="python -m flashbench.site",
               description="asv publish, with local copies of the site's JS")
    p.add_argument("--html-dir", help="where to write the site (default: asv.conf.json's)")
    p.add_argument("--config", default="asv.conf.json", help="asv configuration file")
    p.add_argument("--last", type=_last, metavar="N|all", default=None,
                   help="publish only the last N commits of each branch (default: all, "
                        "every commit; docs/team.md, 'The site at 3M rows')")
    args = p.parse_args(argv)
    try:  # a missing or unreadable configuration is bad input (exit 2), not a failed publish
        read_config(args.config)
    except ValueError as exc:
        p.error(f"--config: {exc}")
    try:
        print(publish(config=args.config, html_dir=args.html_dir, last=args.last))
    except (PublishError, WindowError, OSError, ValueError) as exc:
        print(f"{p.prog}: failed: {' '.join(str(exc).split())}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
