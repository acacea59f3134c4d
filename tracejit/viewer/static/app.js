// tracejit graph viewer: draws the program document (window.TRACEJIT) with dagre's layout.
// Submodule calls are collapsed groups; clicking one expands it in place (its graph is laid out
// only when shown, so a BERT-base program with thousands of nodes stays quick to open).
// URL hash options (used by the browser test): #expand=N expands N levels, #search=TEXT searches.
(function () {
  "use strict";
  const DOC = window.TRACEJIT;
  const SVGNS = "http://www.w3.org/2000/svg";
  const expanded = new Set();
  let method = DOC.roots[0];
  let selected = null;
  let view = { x: 0, y: 0, k: 1 };
  const $ = (id) => document.getElementById(id);

  // ---- which graph is called from where (for search hits inside collapsed groups) ----------------
  const parentOf = {};   // graph key -> [parent graph key, call node index]
  (function index() {
    const queue = DOC.roots.slice();
    while (queue.length) {
      const key = queue.shift();
      DOC.graphs[key].nodes.forEach((n, i) => {
        if (n.kind === "call" && !(n.call in parentOf) && !DOC.roots.includes(n.call)) {
          parentOf[n.call] = [key, i];
          queue.push(n.call);
        }
      });
    }
  })();

  function instancePath(key) {   // instance id of the first call chain reaching graph ``key``
    const chain = [];
    while (key in parentOf) { const [p, i] = parentOf[key]; chain.unshift(i); key = p; }
    return { root: key, ids: chain.map((_, j) => key + "/" + chain.slice(0, j + 1).join("/")) };
  }

  // ---- layout: one flat dagre layout per shown graph, an expanded call laid out as a box ----------
  function layoutInstance(inst, key) {
    const graph = DOC.graphs[key];
    const g = new dagre.graphlib.Graph({ multigraph: true });
    g.setGraph({ rankdir: "TB", nodesep: 18, ranksep: 26, marginx: 12, marginy: 12 });
    g.setDefaultEdgeLabel(() => ({}));
    const children = {};
    graph.nodes.forEach((n, i) => {
      const id = inst + "/" + i;
      if (n.kind === "call" && expanded.has(id)) {
        const sub = layoutInstance(id, n.call);
        const callee = DOC.graphs[n.call];
        sub.title = `${callee.module} (${callee.type}.${callee.method})`;
        children[id] = sub;
        g.setNode(id, { width: Math.max(sub.width, 7 * sub.title.length + 24), height: sub.height + 20 });
        return;
      }
      const lines = [n.kind === "call" ? "\u25B8 " + n.label : n.label, n.type || ""];
      const w = 7.2 * Math.max(lines[0].length, Math.min(lines[1].length, 46)) + 16;
      g.setNode(id, { width: Math.min(Math.max(90, w), 360), height: lines[1] ? 38 : 24, lines, node: n });
    });
    graph.nodes.forEach((n, i) => n.inputs.forEach((a) => g.setEdge(inst + "/" + a[0], inst + "/" + i)));
    dagre.layout(g);
    return { g, key, children, width: g.graph().width || 1, height: g.graph().height || 1 };
  }

  // ---- drawing -------------------------------------------------------------------------------------
  function el(tag, attrs, parent) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  function drawInstance(lay, ox, oy, layers, pos) {
    let count = 0;
    const g = lay.g;
    g.edges().forEach((e) => {
      const pts = g.edge(e).points || [];
      if (!pts.length) return;
      el("path", { d: "M" + pts.map((p) => (p.x + ox) + "," + (p.y + oy)).join("L"), class: "edge",
                   "marker-end": "url(#arrow)" }, layers.edges);
    });
    g.nodes().forEach((id) => {
      const d = g.node(id);
      const x = ox + d.x - d.width / 2, y = oy + d.y - d.height / 2;
      pos[id] = { x: ox + d.x, y: oy + d.y };
      const sub = lay.children[id];
      if (sub) {
        const c = el("g", { class: "cluster", "data-id": id }, layers.clusters);
        el("rect", { x, y, width: d.width, height: d.height, rx: 6 }, c);
        const t = el("text", { x: x + 8, y: y + 14, class: "ctitle" }, c);
        t.textContent = "\u25BE " + sub.title;
        c.addEventListener("click", (ev) => { ev.stopPropagation(); expanded.delete(id); render(id); });
        count += drawInstance(sub, x + (d.width - sub.width) / 2, y + 20, layers, pos);
        return;
      }
      count++;
      const n = d.node;
      const cls = ["node", n.kind, n.ledger ? "ledger" : "", id === selected ? "selected" : ""].join(" ");
      const grp = el("g", { class: cls, "data-id": id, "data-op": n.op || n.label }, layers.nodes);
      el("rect", { x, y, width: d.width, height: d.height, rx: 4 }, grp);
      el("title", {}, grp).textContent = [n.op || n.label, n.type, n.source].filter(Boolean).join("\n");
      d.lines.forEach((line, k) => {
        if (!line) return;
        const t = el("text", { x: ox + d.x, y: y + 15 + 15 * k, class: k ? "sub" : "main" }, grp);
        t.textContent = line.length > 50 ? line.slice(0, 49) + "\u2026" : line;
      });
      grp.addEventListener("click", (ev) => {
        ev.stopPropagation();
        selected = id;
        show(n, lay.key);
        if (n.kind === "call") { expanded.add(id); render(id); } else highlight(id);
      });
    });
    return count;
  }

  function render(focusId) {
    const lay = layoutInstance(method, method);
    const svg = $("canvas");
    const root = $("scene");
    root.textContent = "";
    const layers = { clusters: el("g", {}, root), edges: el("g", {}, root), nodes: el("g", {}, root) };
    const pos = {};
    const count = drawInstance(lay, 0, 0, layers, pos);
    document.body.dataset.rendered = String(count);
    $("stats").textContent = `${count} nodes shown of ${DOC.node_count} \u00B7 ${DOC.kind} ${DOC.name}`;
    const r = svg.getBoundingClientRect();
    if (focusId && pos[focusId]) {
      view = { k: 1, x: r.width / 2 - pos[focusId].x, y: r.height / 2 - pos[focusId].y };
    } else {
      const k = Math.min(1.2, r.width / lay.width, r.height / lay.height) || 1;
      view = { k, x: (r.width - lay.width * k) / 2, y: 10 };
    }
    apply();
  }

  function apply() { $("scene").setAttribute("transform", `translate(${view.x},${view.y}) scale(${view.k})`); }

  function highlight(id) {
    document.querySelectorAll(".node.selected").forEach((e) => e.classList.remove("selected"));
    const e = document.querySelector(`.node[data-id="${CSS.escape(id)}"]`);
    if (e) e.classList.add("selected");
  }

  function show(n, key) {
    const g = DOC.graphs[key];
    const rows = [["kind", n.kind], ["op", n.op || ""], ["call target", n.target || ""], ["output", n.type || ""],
                  ["structure", n.structure || ""], ["guard", n.guard || ""],
                  ["constants", (n.consts || []).join(", ")], ["source", n.source || ""],
                  ["module", `${g.module || "(root)"} (${g.type}.${g.method})`]];
    const box = $("details");
    box.textContent = "";
    const h = document.createElement("h3"); h.textContent = n.label; box.appendChild(h);
    rows.forEach(([k, v]) => {
      if (!v) return;
      const p = document.createElement("div"); p.className = "row";
      const b = document.createElement("b"); b.textContent = k + ": "; p.appendChild(b);
      p.appendChild(document.createTextNode(v)); box.appendChild(p);
    });
    if (n.ledger) {
      const src = (n.source || "").split(" (")[0];
      DOC.ledger.filter((e) => e.source.split(" (")[0] === src).forEach((e) => {
        const p = document.createElement("div"); p.className = "row ledger-entry";
        p.textContent = `ledger [${e.kind}] ${e.message} (value seen: ${e.value})`;
        box.appendChild(p);
      });
    }
  }

  // ---- search --------------------------------------------------------------------------------------
  function search(text) {
    const q = text.trim().toLowerCase();
    const list = $("hits");
    list.textContent = "";
    if (!q) { $("hit-count").textContent = ""; return []; }
    const hits = [];
    for (const key in DOC.graphs) {
      DOC.graphs[key].nodes.forEach((n, i) => {
        const hay = [DOC.graphs[key].module, n.label, n.op, n.target, n.type, n.source].join(" ").toLowerCase();
        if (hay.includes(q)) hits.push([key, i, n]);
      });
    }
    $("hit-count").textContent = `${hits.length} match${hits.length === 1 ? "" : "es"}`;
    hits.slice(0, 200).forEach(([key, i, n]) => {
      const li = document.createElement("li");
      li.className = "hit";
      li.textContent = `${DOC.graphs[key].module || "(root)"} \u00B7 ${n.label} ${n.type || ""}`;
      li.title = n.source || "";
      li.addEventListener("click", () => reveal(key, i));
      list.appendChild(li);
    });
    return hits;
  }

  function reveal(key, i) {
    const path = instancePath(key);
    method = path.root;
    path.ids.forEach((id) => expanded.add(id));
    const inst = path.ids.length ? path.ids[path.ids.length - 1] : method;
    selected = inst + "/" + i;
    show(DOC.graphs[key].nodes[i], key);
    render(selected);
  }

  // ---- controls ------------------------------------------------------------------------------------
  function expandLevels(levels) {
    let frontier = [method];
    for (let l = 0; l < levels; l++) {
      const next = [];
      frontier.forEach((inst) => {
        const key = inst === method ? method : keyOf(inst);
        DOC.graphs[key].nodes.forEach((n, i) => {
          if (n.kind === "call") { expanded.add(inst + "/" + i); next.push(inst + "/" + i); }
        });
      });
      frontier = next;
    }
  }

  function keyOf(inst) {   // graph key an expanded call instance shows
    const parts = inst.split("/");
    let key = parts[0];
    for (let j = 1; j < parts.length; j++) key = DOC.graphs[key].nodes[+parts[j]].call;
    return key;
  }

  function setup() {
    document.title = `${DOC.name} \u2014 tracejit`;
    $("title").textContent = DOC.name;
    const sel = $("method");
    DOC.roots.forEach((k) => { const o = document.createElement("option"); o.value = k; o.textContent = k.slice(1); sel.appendChild(o); });
    sel.addEventListener("change", () => { method = sel.value; expanded.clear(); render(); });
    $("search").addEventListener("input", (e) => search(e.target.value));
    $("expand").addEventListener("click", () => { expandLevels(1 + depth()); render(); });
    $("collapse").addEventListener("click", () => { expanded.clear(); render(); });
    DOC.guards.forEach((text) => {
      const li = document.createElement("li"); li.textContent = text; $("guards").appendChild(li);
    });
    $("sizes").textContent = DOC.sizes || "";
    const lg = $("ledger");
    DOC.ledger.forEach((e) => {
      const li = document.createElement("li");
      li.textContent = `[${e.kind}] ${e.source || "?"}: ${e.message}`;
      lg.appendChild(li);
    });
    $("ledger-count").textContent = String(DOC.ledger.length);
    const svg = $("canvas");
    let drag = null;
    svg.addEventListener("mousedown", (e) => { drag = [e.clientX - view.x, e.clientY - view.y]; });
    window.addEventListener("mouseup", () => { drag = null; });
    window.addEventListener("mousemove", (e) => { if (drag) { view.x = e.clientX - drag[0]; view.y = e.clientY - drag[1]; apply(); } });
    svg.addEventListener("wheel", (e) => {
      e.preventDefault();
      const f = Math.exp(-e.deltaY * 0.0015), r = svg.getBoundingClientRect();
      const mx = e.clientX - r.left, my = e.clientY - r.top;
      view.x = mx - (mx - view.x) * f; view.y = my - (my - view.y) * f; view.k *= f; apply();
    }, { passive: false });
  }

  function depth() {
    let d = 0;
    expanded.forEach((id) => { d = Math.max(d, id.split("/").length - 1); });
    return d;
  }

  setup();
  const opts = new URLSearchParams(location.hash.slice(1));
  if (opts.get("expand")) expandLevels(+opts.get("expand"));
  render();
  if (opts.get("search")) {
    $("search").value = opts.get("search");
    const hits = search(opts.get("search"));
    if (hits.length) reveal(hits[0][0], hits[0][1]);
  }
  document.body.dataset.ready = "1";
})();
