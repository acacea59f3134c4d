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

  // A saved file may be crafted: the page draws at most LIM.drawn nodes, lays out with dagre only a graph whose
  // work (nodes + the rank-spanning edge segments dagre adds) is under LIM.dagre_work (else, or when dagre
  // fails, a plain layered layout, linear), expands calls LIM.expand_depth levels deep, and says where it stops.
  const LIM = DOC.limits || { drawn: 8000, dagre_work: 3000, expand_depth: 64 };
  let budget = null;
  const LEDGER_SHOWN = 1000;
  let expandStopped = false;   // the last "expand" stopped at the drawing limit or the depth limit   // ledger entries listed in the side bar   // per render: { left, cut: graphs drawn in part, shallow: calls kept collapsed, plain }

  // ---- which graph is called from where (for search hits inside collapsed groups) ----------------
  const parentOf = {};   // graph key -> [parent graph key, call node index]
  (function index() {
    const roots = new Set(DOC.roots);
    const queue = DOC.roots.slice();
    for (let q = 0; q < queue.length; q++) {
      const key = queue[q];
      ((DOC.graphs[key] || {}).nodes || []).forEach((n, i) => {
        if (n.kind === "call" && !Object.prototype.hasOwnProperty.call(parentOf, n.call) && !roots.has(n.call)
            && n.call in DOC.graphs) {
          parentOf[n.call] = [key, i];
          queue.push(n.call);
        }
      });
    }
  })();

  function instancePath(key) {   // instance id of the first call chain reaching graph ``key``
    const chain = [];
    while (Object.prototype.hasOwnProperty.call(parentOf, key)) {
      const [p, i] = parentOf[key]; chain.push(i); key = p;
    }
    chain.reverse();
    const ids = [];
    let id = key;
    for (const i of chain.slice(0, LIM.expand_depth)) { id += "/" + i; ids.push(id); }
    return { root: key, ids, complete: chain.length <= LIM.expand_depth };
  }

  // ---- layout: one flat layout per shown graph, an expanded call laid out as a box ----------------
  function layoutInstance(inst, key, depth) {
    const graph = DOC.graphs[key];
    const all = graph.nodes;
    const shown = Math.min(all.length, Math.max(1, budget.left));
    if (shown < all.length) budget.cut.push(`${graph.module || "(root)"}.${graph.method}: ${shown} of ${all.length}`);
    budget.left -= shown;
    const items = [], children = {};
    for (let i = 0; i < shown; i++) {
      const n = all[i], id = inst + "/" + i;
      if (n.kind === "call" && expanded.has(id)) {
        if (depth < LIM.expand_depth && budget.left > 0 && n.call in DOC.graphs) {
          const sub = layoutInstance(id, n.call, depth + 1);
          const callee = DOC.graphs[n.call];
          sub.title = `${callee.module} (${callee.type}.${callee.method})`;
          children[id] = sub;
          items.push({ id, width: Math.min(Math.max(sub.width, 7 * sub.title.length + 24), sub.width + 360),
                       height: sub.height + 20 });
          continue;
        }
        budget.shallow++;
      }
      const lines = [n.kind === "call" ? "\u25B8 " + n.label : String(n.label), String(n.type || "")];
      const w = 7.2 * Math.max(Math.min(lines[0].length, 50), Math.min(lines[1].length, 46)) + 16;
      items.push({ id, width: Math.min(Math.max(90, w), 360), height: lines[1] ? 38 : 24, lines, node: n });
    }
    const edges = [];   // [producer, consumer] item indices, producer first (the document's order)
    for (let i = 0; i < shown; i++) {
      (all[i].inputs || []).forEach((a) => { if (a[0] >= 0 && a[0] < i) edges.push([a[0], i]); });
    }
    const lay = layout(items, edges);
    return { ...lay, key, children };
  }

  function ranks(count, edges) {   // longest path from the inputs: a node one rank below each of its producers
    const rank = new Array(count).fill(0);
    edges.forEach(([a, b]) => { if (rank[a] + 1 > rank[b]) rank[b] = rank[a] + 1; });
    return rank;
  }

  function layout(items, edges) {
    const rank = ranks(items.length, edges);
    let work = items.length;
    edges.forEach(([a, b]) => { work += rank[b] - rank[a]; });   // dagre's dummy nodes, at most
    if (work <= LIM.dagre_work) {
      try { return dagreLayout(items, edges); } catch (e) { /* recursion too deep: the plain layout */ }
    }
    budget.plain++;
    return plainLayout(items, edges, rank);
  }

  function dagreLayout(items, edges) {
    const g = new dagre.graphlib.Graph({ multigraph: true });
    g.setGraph({ rankdir: "TB", nodesep: 18, ranksep: 26, marginx: 12, marginy: 12 });
    g.setDefaultEdgeLabel(() => ({}));
    items.forEach((it) => g.setNode(it.id, { width: it.width, height: it.height }));
    edges.forEach(([a, b]) => g.setEdge(items[a].id, items[b].id));
    dagre.layout(g);
    const nodes = items.map((it) => ({ ...it, x: g.node(it.id).x, y: g.node(it.id).y }));
    const lines = g.edges().map((e) => g.edge(e).points || []);
    return { nodes, edges: lines, width: g.graph().width || 1, height: g.graph().height || 1 };
  }

  function plainLayout(items, edges, rank) {   // rows by rank, at most 24 nodes a row: linear in the graph
    const rows = [];
    items.forEach((it, i) => {
      const r = rank[i];
      while (rows.length <= r) rows.push([]);
      rows[r].push(i);
    });
    const nodes = new Array(items.length);
    let y = 12, width = 1;
    rows.forEach((row) => {
      for (let s = 0; s < row.length; s += 24) {
        const part = row.slice(s, s + 24);
        let x = 12, h = 0;
        part.forEach((i) => {
          const it = items[i];
          nodes[i] = { ...it, x: x + it.width / 2, y: 0 };
          x += it.width + 18;
          h = Math.max(h, it.height);
        });
        part.forEach((i) => { nodes[i].y = y + h / 2; });
        y += h + 26;
        width = Math.max(width, x);
      }
    });
    const lines = edges.map(([a, b]) => [{ x: nodes[a].x, y: nodes[a].y + nodes[a].height / 2 },
                                         { x: nodes[b].x, y: nodes[b].y - nodes[b].height / 2 }]);
    return { nodes, edges: lines, width, height: y };
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
    lay.edges.forEach((pts) => {
      if (!pts.length) return;
      el("path", { d: "M" + pts.map((p) => (p.x + ox) + "," + (p.y + oy)).join("L"), class: "edge",
                   "marker-end": "url(#arrow)" }, layers.edges);
    });
    lay.nodes.forEach((d) => {
      const id = d.id;
      const x = ox + d.x - d.width / 2, y = oy + d.y - d.height / 2;
      pos[id] = { x: ox + d.x, y: oy + d.y };
      const sub = lay.children[id];
      if (sub) {
        const c = el("g", { class: "cluster", "data-id": id }, layers.clusters);
        el("rect", { x, y, width: d.width, height: d.height, rx: 6 }, c);
        const t = el("text", { x: x + 8, y: y + 14, class: "ctitle" }, c);
        t.textContent = "\u25BE " + (sub.title.length > 80 ? sub.title.slice(0, 79) + "\u2026" : sub.title);
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
    if (!(method in DOC.graphs)) {   // a module with no traced method: nothing to draw
      $("stats").textContent = `no traced method to draw \u00B7 ${DOC.kind} ${DOC.name}`;
      document.body.dataset.rendered = "0";
      return;
    }
    budget = { left: LIM.drawn, cut: [], shallow: 0, plain: 0 };
    const lay = layoutInstance(method, method, 0);
    const svg = $("canvas");
    const root = $("scene");
    root.textContent = "";
    const layers = { clusters: el("g", {}, root), edges: el("g", {}, root), nodes: el("g", {}, root) };
    const pos = {};
    const count = drawInstance(lay, 0, 0, layers, pos);
    document.body.dataset.rendered = String(count);
    $("stats").textContent = `${count} nodes shown of ${DOC.node_count} \u00B7 ${DOC.kind} ${DOC.name}`;
    const notes = [];
    if (budget.cut.length) notes.push(`truncated: at most ${LIM.drawn} nodes are drawn at once (` +
                                      budget.cut.slice(0, 3).join("; ") + (budget.cut.length > 3 ? "; ..." : "") +
                                      "); search still finds every node");
    if (budget.shallow) notes.push(`${budget.shallow} call${budget.shallow > 1 ? "s" : ""} left collapsed ` +
                                   `(drawing limit, or more than ${LIM.expand_depth} levels deep)`);
    if (expandStopped) notes.push(`expansion stopped at the drawing limit (${LIM.drawn} nodes) or ` +
                                  `${LIM.expand_depth} levels`);
    if (budget.plain) notes.push(`${budget.plain} graph${budget.plain > 1 ? "s" : ""} too big for the full ` +
                                 "layout: drawn in plain rows by depth");
    $("limits").textContent = notes.join(" \u00B7 ");
    document.body.dataset.truncated = String(budget.cut.length + budget.shallow + (expandStopped ? 1 : 0));
    document.body.dataset.plain = String(budget.plain);
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
                  ["structure", n.structure == null ? "" : (g.structures || [])[n.structure] || ""], ["guard", n.guard || ""],
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
    selected = path.complete ? inst + "/" + i : null;
    show(DOC.graphs[key].nodes[i], key);
    render(selected);
  }

  // ---- controls ------------------------------------------------------------------------------------
  function expandLevels(levels) {   // breadth first, stopping at the drawing limit (a call graph may double
    let frontier = [[method, method]];   // at each level: 2^40 instances)
    let total = 0;
    expandStopped = false;
    if (!(method in DOC.graphs)) return;
    for (let l = 0; l < levels && frontier.length; l++) {
      if (l >= LIM.expand_depth) { expandStopped = true; return; }
      const next = [];
      for (const [inst, key] of frontier) {
        const nodes = DOC.graphs[key].nodes;
        total += nodes.length;
        if (total > LIM.drawn) { expandStopped = true; return; }
        nodes.forEach((n, i) => {
          if (n.kind === "call" && n.call in DOC.graphs) { expanded.add(inst + "/" + i); next.push([inst + "/" + i, n.call]); }
        });
      }
      frontier = next;
    }
  }

  function setup() {
    document.title = `${DOC.name} \u2014 tracejit`;
    $("title").textContent = DOC.name;
    const sel = $("method");
    DOC.roots.forEach((k) => { const o = document.createElement("option"); o.value = k; o.textContent = k.slice(1); sel.appendChild(o); });
    sel.addEventListener("change", () => { method = sel.value; expanded.clear(); render(); });
    $("search").addEventListener("input", (e) => search(e.target.value));
    $("expand").addEventListener("click", () => { expandLevels(1 + depth()); render(); });
    $("collapse").addEventListener("click", () => { expanded.clear(); expandStopped = false; render(); });
    DOC.guards.forEach((text) => {
      const li = document.createElement("li"); li.textContent = text; $("guards").appendChild(li);
    });
    $("sizes").textContent = DOC.sizes || "";
    const lg = $("ledger");
    DOC.ledger.slice(0, LEDGER_SHOWN).forEach((e) => {
      const li = document.createElement("li");
      li.textContent = `[${e.kind}] ${e.source || "?"}: ${e.message}`;
      lg.appendChild(li);
    });
    if (DOC.ledger.length > LEDGER_SHOWN) {
      const li = document.createElement("li");
      li.textContent = `truncated: ${DOC.ledger.length - LEDGER_SHOWN} more entries (tracejit inspect lists them all)`;
      lg.appendChild(li);
    }
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
