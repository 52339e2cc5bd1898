"""Take docs/images/report.png: a real offline search's report, rendered by headless Chromium.

    python3 scripts/report_screenshot.py [--out docs/images/report.png]

It runs ``maxcode optimize examples/cpp/io_bound_sum`` with the offline rules proposer in a
scratch home, writes the run's HTML report, and screenshots it; nothing is drawn by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def maxcode(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "maxcode", *args],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"maxcode {args[0]} failed: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images" / "report.png")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=1500)
    options = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium is not installed (bash scripts/install.sh installs it)")
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MAXCODE_")}
        env["MAXCODE_HOME"] = str(home / "home")
        store = str(home / "runs.db")
        maxcode(
            "optimize", "examples/cpp/io_bound_sum", "--depth", "3", "--candidates", "4",
            "--store", store, "--output", str(home / "best.cpp"), env=env,
        )  # fmt: skip
        run_id = json.loads(maxcode("runs", "--store", store, "--json", env=env))["runs"][0]
        page = home / "report.html"
        maxcode("report", run_id["run_id"], "--store", store, "-o", str(page), env=env)
        options.out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", f"--user-data-dir={home / 'profile'}", "--hide-scrollbars",
                f"--window-size={options.width},{options.height}",
                f"--screenshot={options.out}", page.as_uri(),
            ],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
    print(f"wrote {options.out}")


if __name__ == "__main__":
    main()
