// The network view: one SVG circle per node and one line per edge, created once per topology.
//
// Updates only touch attributes that changed: a node's fill when its colour bucket changes, an
// edge's stroke when its activity level changes. With 225 nodes reporting 10 times a second
// that is a few hundred attribute writes per frame at most, where re-rendering a chart would
// rebuild every element. Positions come from the server (networkx), so nothing is laid out here.
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  // Viridis (matplotlib), sampled at 9 stops: perceptually uniform and readable when printed.
  const VIRIDIS = ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89",
    "#35b779", "#6ece58", "#fde725"];
  const BUCKETS = 128;
  const EDGE_STYLE = [  // by activity level: idle, low, normal, hot
    { color: "#d5d9e0", width: 1 },
    { color: "#9bb4d3", width: 1.5 },
    { color: "#4a7fc1", width: 2.5 },
    { color: "#e8590c", width: 3.5 },
  ];

  function rgb(hex) {
    const n = parseInt(hex.slice(1), 16);
    return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
  }
  const PALETTE = (function () {
    const stops = VIRIDIS.map(rgb);
    const out = [];
    for (let b = 0; b <= BUCKETS; b++) {
      const f = (b / BUCKETS) * (stops.length - 1);
      const i = Math.min(stops.length - 2, Math.floor(f));
      const w = f - i;
      const c = stops[i].map((v, k) => Math.round(v + w * (stops[i + 1][k] - v)));
      out.push(`rgb(${c[0]},${c[1]},${c[2]})`);
    }
    return out;
  })();

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const k in attrs) node.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(node);
    return node;
  }

  function fmt(v, digits) {
    if (v === null || v === undefined) return "–";
    const a = Math.abs(v);
    return a !== 0 && (a < 1e-3 || a >= 1e5) ? v.toExponential(digits ? digits - 1 : 2) :
      Number(v.toPrecision(digits || 4)).toString();
  }

  class NetworkView {
    constructor(container) {
      this.container = container;
      this.circles = [];
      this.lines = [];
      this.buckets = [];
      this.levels = [];
      this.values = [];
      this.names = [];
    }

    // Draw the topology once: edges below, nodes above, a colour bar on the right.
    build(layout, levels, values, label) {
      this.container.textContent = "";
      if (!layout) {
        const p = document.createElement("p");
        p.className = "muted";
        p.textContent = "waiting for the topology…";
        this.container.appendChild(p);
        this.circles = [];
        this.lines = [];
        return;
      }
      const n = layout.x.length;
      const px = (v) => 0.04 + 0.92 * layout.x[v];
      const py = (v) => 0.04 + 0.92 * (1 - layout.y[v]);
      let shortest = Infinity;
      for (const [u, v] of layout.edges) {
        shortest = Math.min(shortest, Math.hypot(px(u) - px(v), py(u) - py(v)));
      }
      const r = Math.max(0.006, Math.min(0.04, 0.3 * (Number.isFinite(shortest) ? shortest : 0.1)));
      const svg = el("svg", { viewBox: "0 0 1.22 1", preserveAspectRatio: "xMidYMid meet",
        width: "100%", height: "100%", role: "img", "aria-label": `network of ${n} nodes` });
      const edges = el("g", { class: "edges" }, svg);
      this.lines = layout.edges.map(([u, v], k) => {
        const st = EDGE_STYLE[levels[k] || 0];
        return el("line", { x1: px(u), y1: py(u), x2: px(v), y2: py(v), stroke: st.color,
          "stroke-width": st.width, "vector-effect": "non-scaling-stroke",
          "stroke-linecap": "round" }, edges);
      });
      this.levels = layout.edges.map((_, k) => levels[k] || 0);
      const nodes = el("g", { class: "nodes" }, svg);
      this.circles = [];
      for (let v = 0; v < n; v++) {
        const c = el("circle", { class: "node", cx: px(v), cy: py(v), r: r, fill: "#ccc",
          stroke: "#fff", "stroke-width": 1, "vector-effect": "non-scaling-stroke" }, nodes);
        c.dataset.node = String(v);
        el("title", {}, c);
        this.circles.push(c);
      }
      this.buckets = new Array(n).fill(-1);
      this.values = new Array(n).fill(null);
      // Tooltips are filled in on hover only: keeping 225 titles current would cost writes.
      svg.addEventListener("mouseover", (ev) => {
        const v = ev.target && ev.target.dataset ? ev.target.dataset.node : undefined;
        if (v === undefined) return;
        const k = Number(v);
        ev.target.firstChild.textContent =
          `node ${k}${this.names[k] ? " (" + this.names[k] + ")" : ""}\n${label} = ${fmt(this.values[k])}`;
      });
      this.buildColorbar(svg, label);
      this.container.appendChild(svg);
      this.setValues(values);
    }

    buildColorbar(svg, label) {
      const defs = el("defs", {}, svg);
      const grad = el("linearGradient", { id: "viridis", x1: 0, y1: 1, x2: 0, y2: 0 }, defs);
      VIRIDIS.forEach((c, i) => el("stop", { offset: i / (VIRIDIS.length - 1), "stop-color": c }, grad));
      // The bar sits right of the graph, its labels above and below it so they never clip.
      const g = el("g", { class: "colorbar", "font-size": 0.03, fill: "#444",
        "text-anchor": "middle" }, svg);
      this.bar = el("rect", { x: 1.1, y: 0.12, width: 0.03, height: 0.76, fill: "url(#viridis)" }, g);
      this.hiText = el("text", { x: 1.115, y: 0.105 }, g);
      this.loText = el("text", { x: 1.115, y: 0.915 }, g);
      this.title = el("text", { x: 1.115, y: 0.05, "font-weight": 600 }, g);
      this.label = label;
      this.titleKey = null;
      this.setTitle([label]);
    }

    // values[v] is node v's number (or null if unknown); names[v] its registered name.
    setValues(values, names) {
      if (names) this.names = names;
      let lo = Infinity, hi = -Infinity;
      for (const x of values) if (x !== null && x !== undefined) { lo = Math.min(lo, x); hi = Math.max(hi, x); }
      const span = hi - lo;
      // The colour range follows the current spread: as gossip converges the differences that
      // remain are still visible (the bar's labels say how small they are). Values equal up to
      // float64 rounding are one value: one colour, and a bar of that one colour.
      const flat = !(span > 1e-13 * Math.max(Math.abs(lo), Math.abs(hi)));
      for (let v = 0; v < this.circles.length; v++) {
        const x = values[v];
        this.values[v] = x;
        const b = x === null || x === undefined || !Number.isFinite(lo) ? -2 :
          flat ? BUCKETS >> 1 : Math.round(((x - lo) / span) * BUCKETS);
        if (b !== this.buckets[v]) {
          this.buckets[v] = b;
          this.circles[v].setAttribute("fill", b < 0 ? "#ccc" : PALETTE[b]);
        }
      }
      if (this.hiText) {
        const known = Number.isFinite(lo);
        // Labels carry as many digits as it takes to tell the ends apart: a spread of 1e-5
        // around 0.0625 reads 0.062531 / 0.06248, not 0.0625 / 0.0625.
        const digits = flat || !known ? 4 : Math.min(15, Math.max(4,
          Math.ceil(Math.log10(Math.max(Math.abs(lo), Math.abs(hi)) / span)) + 2));
        // Past 6 digits the labels would not fit: the bar then shows the values minus an
        // offset, which its title names ("x − 0.06249"). The offset is the smallest value cut
        // at the spread's decade, so both ends read apart with 3 digits (lo' < spread <= hi').
        let offset = 0;
        if (digits > 6) {
          const step = Math.pow(10, Math.floor(Math.log10(span)));
          offset = Number((Math.floor(lo / step) * step).toPrecision(15));
        }
        const shown = (v) => offset ? fmt(v - offset, 3) : fmt(v, digits);
        this.setTitle(!offset ? [this.label] :
          [`${this.label} ${offset < 0 ? "+" : "−"} `, String(Math.abs(offset))]);
        this.hiText.textContent = !known ? "" : flat ? "all " + fmt(hi) : shown(hi);
        this.loText.textContent = !known || flat ? "" : shown(lo);
        this.bar.setAttribute("fill", known && flat ? PALETTE[BUCKETS >> 1] : "url(#viridis)");
        this.flat = known && flat;
      }
    }

    // The bar's title, on one line or, with an offset, two ("x −" above "0.0624999"): a long
    // line would be clipped at the right edge or drawn over the top-right node.
    setTitle(lines) {
      const key = lines.join("");
      if (this.titleKey === key) return;
      this.titleKey = key;
      const two = lines.length > 1;
      this.title.textContent = "";
      this.title.setAttribute("y", two ? 0.035 : 0.05);
      this.title.setAttribute("font-size", two ? 0.024 : 0.03);
      lines.forEach((line, i) => {
        el("tspan", { x: 1.115, dy: i ? 0.03 : 0 }, this.title).textContent = line;
      });
    }

    setLevels(levels) {
      for (let k = 0; k < this.lines.length; k++) {
        const level = levels[k] || 0;
        if (level !== this.levels[k]) {
          this.levels[k] = level;
          const st = EDGE_STYLE[level];
          this.lines[k].setAttribute("stroke", st.color);
          this.lines[k].setAttribute("stroke-width", st.width);
        }
      }
    }

    nodeCount() { return this.circles.length; }
  }

  window.GossipNetwork = NetworkView;
})();
