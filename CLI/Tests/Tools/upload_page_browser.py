#!/usr/bin/env python3
"""Drives `xfer serve`'s upload page in a real Chromium (headless), for UploadPageTests.

What a person does: open the page, pick the protocol, pick a file. At a fifth of it the
connection is lost (the browser goes offline) and comes back: the page retries by itself. Half
way the page is reloaded: it lists the upload as unfinished; the person picks the same file
again and it continues from the server's offset to the end. Prints one JSON object:

  {"ok": true, "url": ..., "offsetWhenOffline": N, "retryStatus": "...", "offsetAtReload": N,
   "resumedFrom": N, "listedAfterReload": true, "screenshots": [...], "browser": "Chrome/..."}

or {"ok": false, "skip": "one-line reason"} when Chromium cannot start here (the test then
skips with that reason), or {"ok": false, "error": ...}.

Chromium is driven over the DevTools protocol on a pipe (--remote-debugging-pipe: messages
are JSON separated by NUL bytes on file descriptors 3 and 4), so nothing but the standard
library is needed. Every wait is for a condition the page shows (a row's data-state or
data-offset), with a deadline; none is a sleep standing in for one.
"""
import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


class Browser:
    def __init__(self, binary, profile):
        to_browser_read, self._to_browser = os.pipe()
        self._from_browser, from_browser_write = os.pipe()

        def wire_pipes():
            os.dup2(to_browser_read, 3)
            os.dup2(from_browser_write, 4)

        self.process = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--remote-debugging-pipe", "--no-first-run", "--no-default-browser-check",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--window-size=900,640", "about:blank"],
            pass_fds=(3, 4), preexec_fn=wire_pipes,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self.events = []

    def _read_message(self, deadline):
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                tail = self.process.stderr.read().decode(errors="replace").strip().splitlines()
                raise ConnectionError("Chromium exited: " + (tail[-1] if tail else "no message"))
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=None, timeout=30):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error'].get('message')}")
                return answer.get("result", {})
            if "method" in answer:
                self.events.append(answer)

    def wait_event(self, method, session, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            for index, event in enumerate(self.events):
                if event["method"] == method and event.get("sessionId") == session:
                    del self.events[: index + 1]
                    return event
            self.events.append(self._read_message(deadline))

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class Page:
    def __init__(self, browser):
        self.browser = browser
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Network", "DOM"):
            self.call(f"{domain}.enable")
        self.call("Emulation.setDeviceMetricsOverride", {"width": 900, "height": 640, "deviceScaleFactor": 1, "mobile": False})

    def call(self, method, params=None, timeout=30):
        return self.browser.call(method, params, session=self.session, timeout=timeout)

    def navigate(self, url, reload=False):
        self.browser.events.clear()
        if reload:
            self.call("Page.reload", {"ignoreCache": True})
        else:
            self.call("Page.navigate", {"url": url})
        self.browser.wait_event("Page.loadEventFired", self.session)

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError("page script failed: " + json.dumps(result["exceptionDetails"])[:300])
        return result["result"].get("value")

    def wait_until(self, expression, what, timeout):
        """Polls a condition the page shows until it holds; fails with `what` at the deadline."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.05)
        raise TimeoutError(f"the page never showed {what} in {timeout} s; it shows: "
                           + str(self.evaluate("document.querySelector('#uploads')?.innerText")))

    def choose_files(self, paths):
        root = self.call("DOM.getDocument")["root"]["nodeId"]
        node = self.call("DOM.querySelector", {"nodeId": root, "selector": "#files"})["nodeId"]
        self.call("DOM.setFileInputFiles", {"nodeId": node, "files": paths})

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        with open(path, "wb") as file:
            file.write(base64.b64decode(data))
        return path


def row(field):
    return f"document.querySelector('#uploads li.upload')?.dataset.{field}"


def run(args):
    binary = shutil.which(args.chromium)
    if not binary:
        return {"ok": False, "skip": f"no {args.chromium} on this machine"}
    profile = tempfile.mkdtemp(prefix="xfer-chromium-")
    try:
        try:
            browser = Browser(binary, profile)
            version = browser.call("Browser.getVersion", timeout=60)["product"]
        except (ConnectionError, TimeoutError, OSError) as error:
            return {"ok": False, "skip": f"Chromium cannot start here ({error})"}
        try:
            return (scenario_controls if args.scenario == "controls" else scenario)(args, browser, version)
        finally:
            browser.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def throttle(page, throughput, offline=False):
    page.call("Network.emulateNetworkConditions", {
        "offline": offline, "latency": 0, "downloadThroughput": -1, "uploadThroughput": throughput})


def wait_for_offset(page, at, timeout):
    return page.wait_until(
        f"(() => {{ const o = Number({row('offset')} || 0); return o >= {at} ? o : 0; }})()",
        f"an acknowledged offset of {at} bytes", timeout)


def scenario(args, browser, version):
    page = Page(browser)
    size = os.path.getsize(args.file)
    shots = []
    page.navigate(args.url)
    if args.token:
        page.evaluate(f"(() => {{ const t = document.querySelector('#token'); t.value = {json.dumps(args.token)}; "
                      "t.dispatchEvent(new Event('input')); })()")
    page.evaluate(f"document.querySelector('input[name=protocol][value={args.protocol}]').click()")
    # A link slow enough that each interruption lands mid-upload, whatever the machine's speed.
    throttle(page, args.throughput)
    page.choose_files([args.file])

    # 1. The connection is lost mid-upload: the page retries by itself, from the server's offset.
    offset_offline = wait_for_offset(page, int(size * args.offline_at), args.timeout)
    throttle(page, args.throughput, offline=True)
    retry_status = page.wait_until(
        f"(() => {{ return {row('state')} === 'retrying' ? document.querySelector('#uploads li.upload .status').innerText : ''; }})()",
        "that it will try again", args.timeout)
    shots.append(page.screenshot(os.path.join(args.screenshots, "upload-page-1-connection-lost.png")))
    throttle(page, args.throughput)

    # 2. The page is reloaded mid-upload: the request in flight is cut (the server keeps what
    # reached it) and the page lists the upload as unfinished.
    offset_at_reload = wait_for_offset(page, int(size * args.reload_at), args.timeout)
    page.navigate(args.url, reload=True)
    listed = page.evaluate(
        "(() => { const s = document.querySelector('#unfinished'); "
        "return !s.hidden && s.innerText.includes(" + json.dumps(os.path.basename(args.file)) + "); })()")
    shots.append(page.screenshot(os.path.join(args.screenshots, "upload-page-2-after-reload.png")))
    throttle(page, -1)
    # The person picks the same file again: the page finds its upload URL and asks for the offset.
    page.choose_files([args.file])
    state = page.wait_until(
        f"(() => {{ const s = {row('state')}; return (s === 'done' || s === 'failed') ? s : ''; }})()",
        "the upload finished", args.timeout)
    result = {
        "ok": state == "done",
        "state": state,
        "status": page.evaluate("document.querySelector('#uploads li.upload .status').innerText"),
        "url": page.evaluate(row("url")),
        "offsetWhenOffline": offset_offline,
        "retryStatus": retry_status,
        "offsetAtReload": offset_at_reload,
        "resumedFrom": int(page.evaluate(row("resumedFrom")) or -1),
        "listedAfterReload": bool(listed),
        "unfinishedLeft": page.evaluate("Object.keys(localStorage).filter(k => k.startsWith('xfer-upload:')).length"),
        "browser": version,
    }
    shots.append(page.screenshot(os.path.join(args.screenshots, "upload-page-3-done.png")))
    result["screenshots"] = shots
    return result


def scenario_controls(args, browser, version):
    """Pause and Resume one file; Cancel another mid-way (the receiver must forget it)."""
    import urllib.error
    import urllib.request
    page = Page(browser)
    page.navigate(args.url)
    page.evaluate(f"document.querySelector('input[name=protocol][value={args.protocol}]').click()")
    size = os.path.getsize(args.file)
    throttle(page, args.throughput)
    page.choose_files([args.file])
    wait_for_offset(page, int(size * 0.25), args.timeout)
    page.evaluate("document.querySelector('#uploads li.upload .pause').click()")
    paused = page.wait_until(
        "(() => { const r = document.querySelector('#uploads li.upload'); "
        "return r.dataset.state === 'paused' ? r.querySelector('.status').innerText : ''; })()", "the upload paused", args.timeout)
    throttle(page, -1)
    page.evaluate("document.querySelector('#uploads li.upload .pause').click()")
    page.wait_until(f"{row('state')} === 'done'", "the resumed upload finished", args.timeout)
    url = page.evaluate(row("url"))

    throttle(page, args.throughput)
    page.choose_files([args.other])
    second = "document.querySelectorAll('#uploads li.upload')[1]"
    page.wait_until(f"(() => {{ const r = {second}; return r && Number(r.dataset.offset || 0) > 0; }})()", "the second upload under way", args.timeout)
    cancelled_url = page.evaluate(f"{second}.dataset.url")
    page.evaluate(f"{second}.querySelector('.cancel').click()")
    page.wait_until(f"{second}.dataset.state === 'cancelled'", "the second upload cancelled", args.timeout)
    # The page's DELETE is under way: the receiver forgets the upload (HEAD 404), within the deadline.
    deadline = time.monotonic() + args.timeout
    status = 0
    while time.monotonic() < deadline:
        request = urllib.request.Request(cancelled_url, method="HEAD", headers={"Tus-Resumable": "1.0.0"})
        try:
            status = urllib.request.urlopen(request).status
        except urllib.error.HTTPError as error:
            status = error.code
        if status == 404:
            break
        time.sleep(0.05)
    shot = page.screenshot(os.path.join(args.screenshots, "upload-page-4-controls.png"))
    return {
        "ok": True, "pausedStatus": paused, "url": url, "cancelledURL": cancelled_url, "cancelledStatus": status,
        "unfinishedLeft": page.evaluate("Object.keys(localStorage).filter(k => k.startsWith('xfer-upload:')).length"),
        "screenshots": [shot], "browser": version,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the receiver's page, http://127.0.0.1:PORT/")
    parser.add_argument("--file", required=True)
    parser.add_argument("--scenario", choices=["interruptions", "controls"], default="interruptions")
    parser.add_argument("--other", help="controls: the file cancelled mid-way")
    parser.add_argument("--protocol", choices=["ietf", "tus"], default="ietf")
    parser.add_argument("--token", default="")
    parser.add_argument("--offline-at", type=float, default=0.2, help="lose the connection once this fraction is acknowledged")
    parser.add_argument("--reload-at", type=float, default=0.5, help="reload once this fraction is acknowledged")
    parser.add_argument("--throughput", type=float, default=16 * 1024 * 1024, help="upload bytes/s before the reload")
    parser.add_argument("--screenshots", default=".")
    parser.add_argument("--chromium", default="chromium")
    parser.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args()
    try:
        result = run(args)
    except Exception as error:  # reported to the test as a failure, with its reason
        result = {"ok": False, "error": f"{type(error).__name__}: {error}"}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
