// Runs a tracejit viewer page's three scripts in node with a minimal DOM (no browser needed): the test
// tests/security/test_round21_viewer.py uses it to see whether a crafted file's page renders.
//   node page_runner.js PAGE.html [#hash]   ->  one JSON line: error, rendered, ready, stats, limits, truncated, plain
"use strict";
const fs = require("fs");
const vm = require("vm");

const html = fs.readFileSync(process.argv[2], "utf8");
const scripts = [...html.matchAll(/<script>([\s\S]*?)<\/script>/g)].map((m) => m[1]);

class El {
  constructor(tag) {
    this.tagName = tag; this.children = []; this.attrs = {}; this._text = ""; this.dataset = {}; this.value = "";
    this.classList = { add() {}, remove() {} };
  }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  appendChild(c) { this.children.push(c); return c; }
  addEventListener() {}
  set textContent(v) { this._text = String(v); this.children = []; }
  get textContent() { return this._text; }
  getBoundingClientRect() { return { width: 1600, height: 1000, left: 0, top: 0 }; }
}

const ids = {};
const document = {
  body: new El("body"), title: "",
  getElementById(id) { return ids[id] || (ids[id] = new El("div")); },
  createElement(t) { return new El(t); },
  createElementNS(_, t) { return new El(t); },
  createTextNode(t) { const e = new El("#text"); e.textContent = t; return e; },
  querySelector() { return null; },
  querySelectorAll() { return []; },
};
const ctx = { document, location: { hash: process.argv[3] || "" }, URLSearchParams, CSS: { escape: (s) => s },
              console, structuredClone, addEventListener() {} };
ctx.window = ctx;
vm.createContext(ctx);
let error = null;
try {
  scripts.forEach((s, i) => vm.runInContext(s, ctx, { filename: "script" + i }));
} catch (e) {
  error = String((e && e.message) || e).slice(0, 300);
}
const d = document.body.dataset;
console.log(JSON.stringify({ error, scripts: scripts.length, rendered: d.rendered, ready: d.ready,
                             truncated: d.truncated, plain: d.plain,
                             stats: ids.stats && ids.stats.textContent, limits: ids.limits && ids.limits.textContent }));
