// The upload page of `xfer serve` (Docs/cli.md, "The upload page"): resumable uploads from a
// browser over the IETF draft or tus 1.0, with no library and no build step.
//
// Each file is one upload on the server, sent in pieces of CHUNK bytes. Its upload URL is kept in
// localStorage under the file's fingerprint (name, size, modification time, type), as tus-js-client
// keeps its URLs: after a reload, picking the same file asks the server for its offset (HEAD) and
// sends only the rest. A lost connection or a 5xx is retried with growing delays, each time from
// the offset the server reports, never from what this page believes it sent. The token, if any,
// lives in sessionStorage: never written to disk by the page.
"use strict";

const CHUNK = 8 * 1024 * 1024;
const CONCURRENT = 3;
/** Seconds before each retry of a failing upload; after the last, the row stops with a Resume button. */
const RETRY_DELAYS = [1, 2, 4, 8, 15, 30, 30, 30, 30, 30];
const STORE_PREFIX = "xfer-upload:";
const IETF_VERSION = "8";

const $ = (selector) => document.querySelector(selector);

// MARK: What survives a reload

const records = {
  key: (fingerprint) => STORE_PREFIX + fingerprint,
  get(fingerprint) {
    try { return JSON.parse(localStorage.getItem(this.key(fingerprint))); } catch { return null; }
  },
  put(fingerprint, record) {
    try { localStorage.setItem(this.key(fingerprint), JSON.stringify(record)); } catch { /* storage full or off: uploads still run */ }
  },
  drop(fingerprint) { localStorage.removeItem(this.key(fingerprint)); },
  all() {
    const found = [];
    for (let i = 0; i < localStorage.length; i++) {
      const key = localStorage.key(i);
      if (!key.startsWith(STORE_PREFIX)) continue;
      const record = this.get(key.slice(STORE_PREFIX.length));
      if (record && record.url) found.push([key.slice(STORE_PREFIX.length), record]);
    }
    return found;
  },
};

const fingerprintOf = (file) => [file.name, file.size, file.lastModified, file.type].join("/");

function token() { return sessionStorage.getItem("xfer-token") || ""; }

function formatBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let unit = 0;
  while (n >= 1024 && unit < units.length - 1) { n /= 1024; unit++; }
  return unit === 0 ? `${n} B` : `${n.toFixed(1)} ${units[unit]}`;
}

// MARK: HTTP

/** A refusal or a lost connection, with whether trying again can help. */
class TransferError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
  get transient() { return this.status === 0 || this.status === 408 || this.status === 429 || this.status >= 500; }
}

/** Why the server refused, from its answer: a problem's title/detail, tus's text, or the status. */
function refusalOf(xhr) {
  if (xhr.status === 0) return new TransferError(0, "the connection was lost");
  if (xhr.status === 401) return new TransferError(401, "this receiver needs an access token: enter it above, then Resume");
  let text = "";
  try {
    const body = JSON.parse(xhr.responseText);
    text = body.detail || body.title || body.error || "";
  } catch { text = (xhr.responseText || "").trim().split("\n")[0].slice(0, 200); }
  return new TransferError(xhr.status, `the receiver answered ${xhr.status}${text ? ": " + text : ""}`);
}

/** One request; resolves with the XMLHttpRequest once answered (any status), rejects when the
 * connection fails. XHR rather than fetch: it reports upload progress. */
function send(upload, method, url, headers, body, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    upload.xhr = xhr;
    xhr.open(method, url);
    for (const [name, value] of Object.entries(headers)) xhr.setRequestHeader(name, value);
    if (token()) xhr.setRequestHeader("Authorization", "Bearer " + token());
    if (onProgress) xhr.upload.onprogress = (event) => onProgress(event.loaded);
    xhr.onload = () => { upload.xhr = null; resolve(xhr); };
    xhr.onerror = () => { upload.xhr = null; reject(new TransferError(0, "the connection was lost")); };
    xhr.onabort = () => { upload.xhr = null; reject(new TransferError(-1, "stopped")); };
    xhr.send(body ?? null);
  });
}

// MARK: The two protocols

function b64(text) {
  return btoa(String.fromCharCode(...new TextEncoder().encode(text)));
}

/** What differs between the protocols: how an upload is created, what its offset is, how a piece is sent. */
const protocols = {
  tus: {
    label: "tus",
    common: { "Tus-Resumable": "1.0.0" },
    create(file) {
      return {
        method: "POST", url: "/files/",
        headers: {
          ...this.common,
          "Upload-Length": String(file.size),
          "Upload-Metadata": `filename ${b64(file.name)}` + (file.type ? `,filetype ${b64(file.type)}` : ""),
        },
      };
    },
    isComplete(xhr, offset, size) { return offset === size; },
    append(offset, last) {
      return { ...this.common, "Upload-Offset": String(offset), "Content-Type": "application/offset+octet-stream" };
    },
  },
  ietf: {
    label: "IETF",
    common: { "Upload-Draft-Interop-Version": IETF_VERSION },
    create(file) {
      // The path names the file (any characters, percent-encoded); the body comes in appends.
      const empty = file.size === 0;
      return {
        method: "POST", url: "/resumable/" + encodeURIComponent(file.name),
        headers: { ...this.common, "Upload-Complete": empty ? "?1" : "?0", "Upload-Length": String(file.size) },
      };
    },
    isComplete(xhr, offset, size) { return xhr.getResponseHeader("Upload-Complete") === "?1" || (xhr.status === 201 && offset === size); },
    append(offset, last) {
      return {
        ...this.common, "Upload-Offset": String(offset), "Upload-Complete": last ? "?1" : "?0",
        "Content-Type": "application/partial-upload",
      };
    },
  },
};

// MARK: One file's upload

class Upload {
  constructor(file, protocol) {
    this.file = file;
    this.fingerprint = fingerprintOf(file);
    this.protocol = protocol;
    this.url = null;
    this.offset = 0;
    this.complete = false;
    this.needsSync = false;
    this.failures = 0;
    this.startedOver = false;
    this.stopped = false;
    this.cancelled = false;
    this.xhr = null;
    this.row = this.makeRow();
    this.sample = { time: performance.now(), bytes: 0, rate: 0 };
  }

  makeRow() {
    const row = $("#upload-row").content.firstElementChild.cloneNode(true);
    row.querySelector(".name").textContent = this.file.name;
    row.querySelector("progress").max = Math.max(this.file.size, 1);
    row.querySelector(".pause").addEventListener("click", () => (this.stopped ? this.resume() : this.pause()));
    row.querySelector(".cancel").addEventListener("click", () => this.cancel());
    $("#uploads").append(row);
    return row;
  }

  show(state, text, sent = this.offset) {
    const row = this.row;
    row.dataset.state = state;
    row.dataset.offset = String(this.offset);
    row.querySelector(".protocol").textContent = protocols[this.protocol].label;
    row.querySelector("progress").value = this.file.size === 0 ? (this.complete ? 1 : 0) : sent;
    row.querySelector(".pause").textContent = this.stopped ? "Resume" : "Pause";
    row.querySelector(".status").textContent = text;
  }

  progressText(sent) {
    const size = this.file.size;
    const percent = size === 0 ? 100 : Math.floor((sent / size) * 100);
    const now = performance.now();
    if (now - this.sample.time > 500) {
      this.sample.rate = ((sent - this.sample.bytes) / (now - this.sample.time)) * 1000;
      this.sample = { time: now, bytes: sent, rate: this.sample.rate };
    }
    const rate = this.sample.rate > 0 ? ` · ${formatBytes(this.sample.rate)}/s` : "";
    return `${percent}% · ${formatBytes(sent)} of ${formatBytes(size)}${rate}`;
  }

  /** Runs until the file is on the server, the user stops it, or retries are exhausted. */
  async run() {
    // Cancelled while it waited for its turn: nothing to do.
    if (this.cancelled) return;
    this.stopped = false;
    this.show("sending", "starting…");
    for (;;) {
      try {
        if (!this.url) await this.open();
        if (this.needsSync) await this.sync();
        while (!this.complete) await this.sendNext();
        return this.finish();
      } catch (error) {
        if (this.stopped || this.cancelled) return;
        if (!(error instanceof TransferError) || !error.transient || this.failures >= RETRY_DELAYS.length) return this.fail(error);
        await this.waitToRetry(RETRY_DELAYS[this.failures++], error);
        if (this.stopped || this.cancelled) return;
        this.needsSync = this.url !== null;
      }
    }
  }

  /** The server's upload for this file: the one a record names, if the server still has it, else a new one. */
  async open() {
    const record = records.get(this.fingerprint);
    if (record && record.url && protocols[record.protocol]) {
      this.protocol = record.protocol;
      this.url = record.url;
      if (await this.sync({ missingIsFine: true })) {
        this.row.dataset.resumedFrom = String(this.offset);
        return;
      }
      records.drop(this.fingerprint);
      this.url = null;
    }
    await this.create();
  }

  async create() {
    const protocol = protocols[this.protocol];
    const request = protocol.create(this.file);
    const xhr = await send(this, request.method, request.url, request.headers, null);
    if (xhr.status !== 201 && xhr.status !== 200) throw refusalOf(xhr);
    const location = xhr.getResponseHeader("Location");
    if (!location) throw new TransferError(xhr.status, "the receiver created the upload but did not say where it is");
    this.url = new URL(location, window.location.href).href;
    this.offset = Number(xhr.getResponseHeader("Upload-Offset") || 0);
    this.complete = this.file.size === 0 && (this.protocol === "tus" || protocol.isComplete(xhr, 0, 0));
    this.row.dataset.url = this.url;
    this.remember();
  }

  /** Asks the server where the upload stands (HEAD). False when it no longer knows it and
   * `missingIsFine`; otherwise a forgotten upload is started over, once. */
  async sync({ missingIsFine = false } = {}) {
    this.show("sending", "asking the receiver where this file stands…");
    const xhr = await send(this, "HEAD", this.url, protocols[this.protocol].common, null);
    if (xhr.status === 404 || xhr.status === 410) {
      if (missingIsFine) return false;
      if (this.startedOver) throw new TransferError(xhr.status, "the receiver forgot this upload again");
      this.startedOver = true;
      records.drop(this.fingerprint);
      this.url = null;
      this.offset = 0;
      await this.create();
      this.needsSync = false;
      return true;
    }
    if (xhr.status >= 300) throw refusalOf(xhr);
    const offset = Number(xhr.getResponseHeader("Upload-Offset"));
    if (!Number.isSafeInteger(offset) || offset < 0 || offset > this.file.size) {
      throw new TransferError(xhr.status, "the receiver reported an offset this file cannot have");
    }
    this.offset = offset;
    this.complete = this.protocol === "tus" ? offset === this.file.size : xhr.getResponseHeader("Upload-Complete") === "?1";
    this.row.dataset.url = this.url;
    this.needsSync = false;
    this.remember();
    // The rate counts from here: bytes the server already had were not sent now.
    this.sample = { time: performance.now(), bytes: offset, rate: 0 };
    return true;
  }

  async sendNext() {
    const start = this.offset;
    const end = Math.min(this.file.size, start + CHUNK);
    const last = end === this.file.size;
    const protocol = protocols[this.protocol];
    const xhr = await send(this, "PATCH", this.url, protocol.append(start, last), this.file.slice(start, end), (loaded) => {
      const sent = start + loaded;
      this.show("sending", this.progressText(sent), sent);
    });
    if (xhr.status === 409) {
      // Another offset than ours: the server's word decides where to go on.
      this.needsSync = true;
      return this.sync();
    }
    if (xhr.status < 200 || xhr.status >= 300) throw refusalOf(xhr);
    const reported = xhr.getResponseHeader("Upload-Offset");
    this.offset = reported === null ? end : Number(reported);
    this.complete = protocol.isComplete(xhr, this.offset, this.file.size);
    this.failures = 0;
    this.remember();
    this.show("sending", this.progressText(this.offset));
  }

  remember() {
    records.put(this.fingerprint, {
      url: this.url, protocol: this.protocol, name: this.file.name, size: this.file.size,
      offset: this.offset, lastModified: this.file.lastModified,
    });
  }

  finish() {
    records.drop(this.fingerprint);
    this.offset = this.file.size;
    this.show("done", "");
    const status = this.row.querySelector(".status");
    status.textContent = `Done · ${formatBytes(this.file.size)}` +
      (this.row.dataset.resumedFrom ? ` (continued from ${formatBytes(Number(this.row.dataset.resumedFrom))})` : "") + " · ";
    const link = document.createElement("a");
    link.href = this.url;
    link.textContent = "open";
    status.append(link);
    forgetUnfinished(this.fingerprint);
  }

  fail(error) {
    this.stopped = true;
    this.show("failed", `Stopped: ${error.message}`);
  }

  /** Waits `seconds` (less when the browser says it is back online), counting down. */
  waitToRetry(seconds, error) {
    return new Promise((resolve) => {
      let left = seconds;
      const tick = () => {
        if (this.stopped || this.cancelled || left <= 0) return done();
        this.show("retrying", `${error.message}; trying again in ${left} s`);
        left -= 1;
      };
      const timer = setInterval(tick, 1000);
      const done = () => { clearInterval(timer); window.removeEventListener("online", done); resolve(); };
      window.addEventListener("online", done);
      tick();
    });
  }

  pause() {
    this.stopped = true;
    this.xhr?.abort();
    this.sample = { time: performance.now(), bytes: this.offset, rate: 0 };
    this.show("paused", `Paused at ${this.progressText(this.offset)}`);
  }

  resume() {
    this.failures = 0;
    this.needsSync = this.url !== null;
    enqueue(this);
  }

  async cancel() {
    this.cancelled = true;
    this.stopped = true;
    this.xhr?.abort();
    records.drop(this.fingerprint);
    this.show("cancelled", "Cancelled");
    // The server drops what it holds, so nothing is left behind.
    if (this.url) await send(this, "DELETE", this.url, protocols[this.protocol].common, null).catch(() => {});
  }
}

// MARK: The queue and the page

const active = new Map();
const queue = [];
let running = 0;

function enqueue(upload) {
  upload.show("waiting", "waiting for its turn");
  queue.push(upload);
  pump();
}

function pump() {
  while (running < CONCURRENT && queue.length > 0) {
    const upload = queue.shift();
    running++;
    upload.run().finally(() => { running--; pump(); });
  }
}

function chosenProtocol() {
  return document.querySelector('input[name="protocol"]:checked').value;
}

function add(files) {
  for (const file of files) {
    const fingerprint = fingerprintOf(file);
    const existing = active.get(fingerprint);
    if (existing && !existing.cancelled && existing.row.dataset.state !== "done") {
      if (existing.stopped) existing.resume();
      continue;
    }
    const upload = new Upload(file, chosenProtocol());
    active.set(fingerprint, upload);
    forgetUnfinished(fingerprint);
    enqueue(upload);
  }
}

function forgetUnfinished(fingerprint) {
  document.querySelector(`#unfinished-list li[data-fingerprint="${CSS.escape(fingerprint)}"]`)?.remove();
  $("#unfinished").hidden = $("#unfinished-list").children.length === 0;
}

/** What a previous visit left unfinished: picking the file again continues it; Forget deletes it on the server. */
function listUnfinished() {
  const list = $("#unfinished-list");
  for (const [fingerprint, record] of records.all()) {
    const item = document.createElement("li");
    item.dataset.fingerprint = fingerprint;
    const percent = record.size ? Math.floor((record.offset / record.size) * 100) : 0;
    const text = document.createElement("span");
    text.textContent = `${record.name} — ${percent}% of ${formatBytes(record.size)} (${protocols[record.protocol]?.label ?? record.protocol})`;
    const forget = document.createElement("button");
    forget.type = "button";
    forget.textContent = "Forget";
    forget.addEventListener("click", () => {
      records.drop(fingerprint);
      forgetUnfinished(fingerprint);
      const headers = { ...(protocols[record.protocol]?.common ?? {}) };
      if (token()) headers.Authorization = "Bearer " + token();
      fetch(record.url, { method: "DELETE", headers }).catch(() => {});
    });
    item.append(text, forget);
    list.append(item);
  }
  $("#unfinished").hidden = list.children.length === 0;
}

function setUp() {
  const input = $("#files");
  input.addEventListener("change", () => { add(input.files); input.value = ""; });
  const drop = $("#drop");
  drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    add(event.dataTransfer.files);
  });

  const tokenField = $("#token");
  tokenField.value = token();
  tokenField.addEventListener("input", () => sessionStorage.setItem("xfer-token", tokenField.value));

  const saved = localStorage.getItem("xfer-protocol");
  if (saved && protocols[saved]) document.querySelector(`input[name="protocol"][value="${saved}"]`).checked = true;
  for (const radio of document.querySelectorAll('input[name="protocol"]')) {
    radio.addEventListener("change", () => localStorage.setItem("xfer-protocol", chosenProtocol()));
  }
  listUnfinished();
}

setUp();
