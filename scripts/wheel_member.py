#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Extracts single files from a wheel on the package index pip is configured with.

Wheels are zip files; the central directory sits at the end, so one file of
a large wheel (vLLM's NCCL wrapper, NCCL's header) costs a few small HTTP
range requests instead of the whole download. pip (the ordinary client)
resolves the requirement to the wheel's address; where the server ignores
ranges, the whole wheel is downloaded instead.

Usage: wheel_member.py REQUIREMENT MEMBER_SUFFIX OUT_FILE
  writes the wheel member whose path ends with MEMBER_SUFFIX to OUT_FILE and
  prints the resolved version. Exit status 3: the index cannot be reached.
"""
import io
import json
import os
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile

UNREACHABLE = 3
# What pip's errors say when the index did not answer (no network, no DNS, a
# proxy refusing, an index that offers no version at all of the package), or
# when there is no pip to ask.
NETWORK_FAILURES = ("No module named pip", "(from versions: none)", "NewConnectionError",
                    "Failed to establish a new connection", "Temporary failure in name",
                    "Name or service not known", "Network is unreachable", "ConnectTimeoutError",
                    "ReadTimeoutError", "ProxyError", "Connection refused", "SSLError")
TIMEOUT_S = 60


class IndexUnreachable(Exception):
    """The package index (or the wheel's host) did not answer."""


def resolve(requirement):
    """(url, version, file name) of the wheel pip would install for requirement."""
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        # One retry, 15 s each: offline, pip's default retries take minutes to give up.
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed",
               "--only-binary", ":all:", "--quiet", "--disable-pip-version-check", "--retries", "1",
               "--timeout", "15", "--report", report, requirement]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired as e:
            raise IndexUnreachable("pip timed out resolving %s" % requirement) from e
        if done.returncode != 0 or not os.path.exists(report):
            why = "pip could not resolve %s: %s" % (requirement, done.stderr.strip()[-400:])
            if any(sign in done.stderr for sign in NETWORK_FAILURES):
                raise IndexUnreachable(why)
            raise RuntimeError(why)  # reachable, and still no such wheel: a real failure
        with open(report) as f:
            item = json.load(f)["install"][0]
    url = item["download_info"]["url"]
    return url, item["metadata"]["version"], url.rsplit("/", 1)[-1]


class RangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file, read by HTTP range requests."""

    def __init__(self, url):
        super().__init__()
        self.url, self.pos = url, 0
        with self._open(urllib.request.Request(url, headers={"Range": "bytes=0-0"})) as r:
            if r.status != 206:
                raise IndexUnreachable("no range support")  # the caller downloads the whole wheel
            self.size = int(r.headers["Content-Range"].rsplit("/", 1)[-1])

    @staticmethod
    def _open(request):
        try:
            return urllib.request.urlopen(request, timeout=TIMEOUT_S)
        except (urllib.error.URLError, OSError) as e:
            raise IndexUnreachable(str(e)) from e

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=0):
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def read(self, n=-1):
        if n is None or n < 0:
            n = self.size - self.pos
        n = min(n, self.size - self.pos)
        if n <= 0:
            return b""
        headers = {"Range": "bytes=%d-%d" % (self.pos, self.pos + n - 1)}
        with self._open(urllib.request.Request(self.url, headers=headers)) as r:
            data = r.read()
        self.pos += len(data)
        return data


def open_wheel(url):
    """The wheel as a ZipFile: remote by ranges, else downloaded whole."""
    try:
        return zipfile.ZipFile(RangeFile(url))
    except IndexUnreachable as e:
        if str(e) != "no range support":
            raise
    data = RangeFile._open(urllib.request.Request(url)).read()
    return zipfile.ZipFile(io.BytesIO(data))


def extract(requirement, suffix, out_file):
    """Writes the member ending with suffix to out_file; returns (version, wheel file name)."""
    url, version, wheel = resolve(requirement)
    with open_wheel(url) as z:
        names = [n for n in z.namelist() if n.endswith(suffix)]
        if len(names) != 1:
            raise ValueError("%s: %d members end with %s" % (wheel, len(names), suffix))
        tmp = out_file + ".part"
        with z.open(names[0]) as src, open(tmp, "wb") as dst:
            while True:
                chunk = src.read(8 << 20)
                if not chunk:
                    break
                dst.write(chunk)
        os.replace(tmp, out_file)
    return version, wheel


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    try:
        version, wheel = extract(sys.argv[1], sys.argv[2], sys.argv[3])
    except IndexUnreachable as e:
        print("wheel_member: the package index cannot be reached: %s" % e, file=sys.stderr)
        sys.exit(UNREACHABLE)
    except (RuntimeError, ValueError, KeyError) as e:
        print("wheel_member: %s" % e, file=sys.stderr)
        sys.exit(1)
    print(version, wheel)


if __name__ == "__main__":
    main()
