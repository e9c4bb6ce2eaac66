"""The asv HTML site, made to work offline.

``asv publish`` writes a site whose pages load jQuery, flot, bootstrap, blueimp-md5,
stupidtable and flot-orderbars from CDNs; offline (CI, air-gapped GPU clusters,
asv issue 669) it shows only "external (JavaScript) dependencies failed to load".
:func:`publish` runs ``asv publish`` and then serves local copies: the npm packages
below are fetched once with ``npm pack`` into a cache folder (nothing is
committed), copied into ``<html_dir>/vendor/``, and every CDN reference in the
site's pages is rewritten to them (the CDN integrity hashes do not match npm's
builds of the files, so they are dropped).

    python -m flashbench.site [--html-dir DIR]   # publish + localise, print the folder
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

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


def fetch_vendor(cache: Path = CACHE) -> Path:
    """npm-pack the packages into ``cache`` (once) and unpack them; returns the folder."""
    cache.mkdir(parents=True, exist_ok=True)
    for spec in PACKAGES:
        name = spec.rsplit("@", 1)[0]
        target = cache / name
        if target.exists():
            continue
        if shutil.which("npm") is None:
            raise RuntimeError("npm is needed once to fetch the site's JavaScript packages")
        out = subprocess.run(["npm", "pack", spec, "--silent"], cwd=cache, capture_output=True,
                             text=True)
        if out.returncode != 0:
            raise RuntimeError(f"npm pack {spec} failed: {out.stderr.strip()}")
        tgz = cache / out.stdout.strip().splitlines()[-1]
        with tarfile.open(tgz) as tar:
            tar.extractall(cache / f".{name}", filter="data")
        (cache / f".{name}" / "package").rename(target)
        shutil.rmtree(cache / f".{name}")
        tgz.unlink()
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


def publish(config: str = "asv.conf.json", html_dir: str | None = None) -> Path:
    """``asv publish`` (optionally into ``html_dir``), then :func:`localize`; returns the folder."""
    cmd = [sys.executable, "-m", "asv", "publish", "--config", config]
    if html_dir:
        cmd += ["--html-dir", html_dir]
    subprocess.run(cmd, check=True, capture_output=True)
    out = Path(html_dir) if html_dir else Path(".asv/html")
    if localize(out, fetch_vendor()) == 0:
        raise RuntimeError(f"no CDN reference found to localise in {out}/*.html")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="asv publish, with local copies of the site's JS")
    p.add_argument("--html-dir", help="where to write the site (default: asv.conf.json's)")
    args = p.parse_args(argv)
    print(publish(html_dir=args.html_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
