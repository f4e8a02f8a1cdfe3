// Live dashboard of a gossip cluster.
//
// How it stays cheap with hundreds of nodes reporting many times a second:
// - the server batches: one "batch" event per tick (0.25 s) with only what changed;
// - this page applies a batch to its own model at once but draws at most once per animation
//   frame, and only what changed: new points are appended with Plotly.extendTraces, the network
//   view (network.js) rewrites only the fills and strokes that changed, and table cells are
//   written only when their text changes. Nothing is rebuilt per message; a full
//   rebuild happens only when a snapshot is (re)loaded: first load, new run, reconnect.
"use strict";

(function () {
  const TOKEN = new URLSearchParams(window.location.search).get("token");
  const PALETTE = ["#2b6cb0", "#dd6b20", "#2f855a", "#9f7aea", "#c53030", "#319795",
    "#b7791f", "#4a5568"];
  const COUNTER_COLS = ["initiated", "served", "retried", "failed", "rejected"];

  // Everything the page knows, exposed for tests and benchmarks (read-only use).
  const dash = {
    snapshot: null, seq: 0, batches: 0, snapshots: 0, latency: [], renderMs: [],
    errors: [], clockOffset: 0, parts: {},
  };
  function timed(name, fn) {
    // Cumulative milliseconds per drawing step, for the benchmark's breakdown.
    const t0 = performance.now();
    fn();
    dash.parts[name] = (dash.parts[name] || 0) + performance.now() - t0;
  }
  window.__dash = dash;
  // Points of the live run's curve, and node markers drawn in the network view (for tests).
  dash.livePoints = () => {
    const i = runTrace.get(liveRun);
    const gd = document.getElementById("error-chart");
    return i === undefined || !gd.data ? 0 : gd.data[i].x.length;
  };
  // Points of the live run's exact curve (the network's state at grid times, gossip.trace).
  dash.exactPoints = () => {
    const i = exactTrace.get(liveRun);
    const gd = document.getElementById("error-chart");
    return i === undefined || !gd.data ? 0 : gd.data[i].x.length;
  };
  // Points of the objective gap's curve (optimization runs).
  dash.gapPoints = () => {
    const gd = document.getElementById("error-chart");
    return gapTrace < 0 || !gd.data ? 0 : gd.data[gapTrace].x.length;
  };
  // Points of a training run's accuracy curve, and whether the simulator's band is drawn.
  dash.trainPoints = () => {
    const gd = document.getElementById("train-accuracy");
    return trainLive < 0 || !gd.data ? 0 : gd.data[trainLive].x.length;
  };
  dash.trainBand = () => trainBandRuns;
  dash.graphNodes = () => document.querySelectorAll("#graph-chart circle.node").length;
  dash.rowsOnScreen = () => [...rowEls.values()].filter((el) => el.visible).length;

  let F = {};            // node field name -> position in a row
  let nodes = new Map(); // id -> row (array, NODE_FIELDS order)
  let rowEls = new Map(); // id -> {tr, tds}
  let runTrace = new Map(); // run id -> index of its curve in the error chart
  let exactTrace = new Map(); // run id -> index of its exact curve in the error chart
  let theoryTrace = -1;
  let gapTrace = -1;     // index of the objective gap's curve (optimization runs), or -1
  let trainLive = -1;    // index of the live curve in each training chart, or -1 (no training)
  let trainBandRuns = 0; // simulated runs behind the training charts' band (0: none drawn)
  let liveRun = "";
  let levels = [];
  let pending = null;    // what the next frame must draw
  let chartPoints = [];  // live-run points not yet on the chart
  let chartExact = [];   // live-run exact points not yet on the chart
  let chartGap = [];     // objective gap rows not yet on the chart
  let chartDue = 0;      // performance.now() after which the chart may be drawn again
  let laterTimer = 0;
  let waiting = [];      // batches that arrived before the snapshot
  let loading = false;
  let source = null;
  let finished = false;  // the run shown is over: its nodes stopped on purpose

  function api(path) {
    if (!TOKEN) return path;
    return path + (path.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(TOKEN);
  }

  function fmt(v, digits) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    const a = Math.abs(v);
    if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(digits || 2);
    return Number(v.toPrecision(digits || 4)).toString();
  }
  const INT = new Intl.NumberFormat("en-US");  // one formatter: toLocaleString builds one per call
  function fmtInt(v) { return v === null || v === undefined ? "–" : INT.format(v); }
  function serverNow() { return Date.now() / 1000 + dash.clockOffset; }
  function setText(el, text) {
    // The last text written is kept on the element: comparing it is cheaper than reading the DOM.
    if (el._text !== text) { el._text = text; el.textContent = text; }
  }
  function setClass(el, cls) { if (el.className !== cls) el.className = cls; }
  const $ = (id) => document.getElementById(id);

  // ---- snapshot: a full rebuild -------------------------------------------------------------

  async function loadSnapshot() {
    if (loading) return;
    loading = true;
    try {
      const resp = await fetch(api("api/snapshot"), { cache: "no-store" });
      if (resp.status === 401) {
        // Nothing can be read without the token: say so once, and stop asking.
        const badge = $("state-badge");
        setText(badge, "token required");
        setClass(badge, "badge bad");
        badge.title = "open this page as /?token=<the coordinator's --dashboard-token>";
        if (source) source.close();
        return;
      }
      if (!resp.ok) throw new Error("snapshot: HTTP " + resp.status);
      const snap = await resp.json();
      dash.snapshot = snap;
      dash.seq = snap.seq;
      dash.snapshots += 1;
      dash.clockOffset = snap.now - Date.now() / 1000;
      F = {};
      snap.node_fields.forEach((name, i) => { F[name] = i; });
      nodes = new Map(snap.nodes.map((row) => [row[F.id], row]));
      liveRun = snap.live_run;
      finished = snap.summary.finished;
      levels = snap.edge_levels.slice();
      buildHeader(snap);
      buildErrorChart(snap);
      buildTraining(snap);
      buildGraph(snap);
      buildTable(snap);
      buildRuns(snap);
      drawMembership(snap.membership || []);
      updateCounters(snap.summary, snap.counters);
      loading = false;
      if (source && source.readyState === EventSource.CLOSED) setTimeout(connect, 2000);
      const queued = waiting.filter((b) => b.seq > dash.seq);
      waiting = [];
      queued.forEach(applyBatch);
    } catch (err) {
      dash.errors.push(String(err));
      setTimeout(loadSnapshot, 2000);
    } finally {
      loading = false;
    }
  }

  // What the run computes, which names the quantity on the chart: averaging (gossip) or the
  // distance to the minimiser x* of an optimization problem (or the consensus, without x*).
  function runKind(snap) {
    const opt = snap.optimization;
    const train = snap.training;
    if (train) {
      // Gradient steps move the sum: no averaging error, no mass drift (training charts).
      return { task: `training ${train.model} on ${train.data}`, title: "", axis: "" };
    }
    if (!opt) {
      return { task: "averaging", title: "Error Σ½|x_v − mean|² vs t",
        axis: "error Σ½|x_v − mean|²" };
    }
    if (!opt.x_star) {
      return { task: opt.problem, title: `Consensus Σ|x_v − x̄|² vs t (${opt.problem})`,
        axis: "consensus Σ|x_v − x̄|²" };
    }
    return { task: opt.problem,
      title: `Distance Σ|x_v − x*|² and objective gap F(x̄) − F(x*) vs t (${opt.problem})`,
      axis: "Σ|x_v − x*|², F(x̄) − F(x*)" };
  }

  function buildHeader(snap) {
    const algorithm = snap.summary.algorithm || (snap.params ? snap.params.algorithm : "");
    setText($("cluster"), "cluster " + snap.cluster);
    setText($("algo-badge"), algorithm ? `${algorithm.toUpperCase()} · ${runKind(snap).task}` :
      "algorithm: –");
    setText($("graph-badge"), snap.graph);
    setText($("error-title"), runKind(snap).title);
    // A training run shows accuracy, gradient steps and exchanges, and how fresh they are;
    // the averaging error and the mass drift mean nothing there (the steps move the sum).
    const training = !!snap.training;
    $("error-panel").hidden = training;
    setClass($("main-charts"), training ? "solo" : "");
    $("card-error").hidden = training;
    $("card-drift").hidden = training;
    $("card-accuracy").hidden = !training;
    $("card-network").hidden = !training;
    $("card-fresh").hidden = !training;
    setText($("c-rate-label"), training ? "gradient steps/s per node (achieved / asked)" :
      "activation rate (achieved / asked)");
    setText($("runs-figure"), training ? "accuracy" : "error");
    $("runs-target").innerHTML = training ? "t at target" : "t<sub>ε</sub>";
    setText($("c-drift-label"), snap.optimization ? "dual sums' drift |Σy| + |Σz|" :
      "mass drift (relative)");
    setText($("x-head"), snap.dim > 1 ? "|x|" : "x");
    const q = snap.quantities;
    setText($("graph-note"), q ? `${q.n} nodes, ${q.n_edges} edges, μ=${fmt(q.mu_gossip, 3)}, ` +
      `R_max=${fmt(q.r_max, 3)}` : "");
  }

  function runColor(i) { return PALETTE[i % PALETTE.length]; }

  // Errors far below eps are rounding noise (a converged cluster sits near 1e-32): the axis
  // stops this many decades below eps, and so does the bound's line.
  const DECADES_BELOW_EPS = 4;

  const ROUNDING_FLOOR = 1e-26;
  // An exact mass drift above this is more than rounding: a value was lost or counted twice.
  const DRIFT_WARN = 1e-9;  // below this an error is float64 round-off on values of order 1

  function floorOf(snap) {
    return snap.eps ? Math.max(snap.eps * Math.pow(10, -DECADES_BELOW_EPS), ROUNDING_FLOOR) : 0;
  }

  function theoryXY(run, tEnd) {
    // The bound is a straight line on a log axis: two points draw it exactly.
    const y0 = run.bound_factor * run.e0;
    const floor = dash.snapshot ? floorOf(dash.snapshot) : 0;
    if (floor > 0 && floor < y0) tEnd = Math.min(tEnd, Math.log(y0 / floor) / run.theta);
    return { x: [0, tEnd], y: [y0, y0 * Math.exp(-run.theta * tEnd)] };
  }

  function buildErrorChart(snap) {
    chartPoints = [];  // the snapshot holds every point so far
    chartExact = [];
    chartGap = [];
    const traces = [];
    runTrace = new Map();
    exactTrace = new Map();
    theoryTrace = -1;
    gapTrace = -1;
    if (snap.training) {
      // Its error chart is hidden, and stays empty: batches bring it no point either.
      Plotly.purge("error-chart");
      return;
    }
    snap.runs.forEach((run, i) => {
      const color = runColor(i);
      const live = run.run_id === snap.live_run;
      const band = run.band && run.band.t.length ? trimBand(run.band, run.eps) : null;
      if (band) {
        traces.push({ x: band.t, y: band.q05, mode: "lines", line: { width: 0 },
          hoverinfo: "skip", showlegend: false, connectgaps: true });
        traces.push({ x: band.t, y: band.q95, mode: "lines", line: { width: 0 },
          fill: "tonexty", fillcolor: hexAlpha(color, 0.15), connectgaps: true,
          name: `simulator 5–95% (${band.runs} runs)`, hoverinfo: "skip" });
      }
      if (run.theta && run.e0 && run.bound_factor) {
        const tEnd = Math.max((run.t || 0) * 1.25, band ? band.t[band.t.length - 1] : 0, 1);
        const th = theoryXY(run, tEnd);
        if (live) theoryTrace = traces.length;
        traces.push({ x: th.x, y: th.y, mode: "lines", hoverinfo: "skip",
          line: { color: color, dash: "dash", width: 1.5 },
          name: `bound ${fmt(run.bound_factor, 2)}·e0·exp(−θt), θ=${fmt(run.theta, 3)}` });
      }
      runTrace.set(run.run_id, traces.length);
      const xy = run.xy.filter((p) => p[1] > 0);
      traces.push({ x: xy.map((p) => p[0]), y: xy.map((p) => p[1]), mode: "lines",
        name: `${(run.algorithm || "?").toUpperCase()} ${run.graph} (${run.run_id})`,
        line: { color: color, width: live ? 2.5 : 1.5 }, opacity: live ? 1 : 0.7,
        hovertemplate: "t=%{x:.4g}<br>error=%{y:.3e}<extra></extra>" });
      // The exact curve: the network's state at grid times every node has passed. It lags the
      // estimate above by about a node's time between jumps, and is what the band is for.
      const exact = (run.exact || []).filter((p) => p[1] > 0);
      // Optimization runs have no exact curve (the primal is not mixed in closed form).
      if ((live && !snap.optimization) || exact.length) {
        exactTrace.set(run.run_id, traces.length);
        traces.push({ x: exact.map((p) => p[0]), y: exact.map((p) => p[1]), mode: "lines",
          name: `exact (${run.run_id})`, line: { color: color, width: 1, dash: "dot" },
          opacity: live ? 1 : 0.7,
          hovertemplate: "t=%{x:.4g}<br>exact error=%{y:.3e}<extra></extra>" });
      }
    });
    const opt = snap.optimization;
    if (opt && opt.x_star) {
      // Optimization: the error above is sum_v |x_v - x*|^2; the objective gap of the nodes'
      // average goes on the same axes, over the whole run (batches extend it).
      const gap = (opt.history || []).filter((r) => r[2] !== null && r[2] > 0);
      gapTrace = traces.length;
      traces.push({ x: gap.map((r) => r[0]), y: gap.map((r) => r[2]), mode: "lines",
        name: `objective gap F(x̄) − F(x*) (${opt.problem})`,
        line: { color: "#555", width: 1.5, dash: "dot" },
        hovertemplate: "t=%{x:.4g}<br>gap=%{y:.3e}<extra></extra>" });
    }
    const shapes = [];
    if (snap.eps) {
      shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: snap.eps, y1: snap.eps,
        line: { color: "#888", width: 1, dash: "dot" } });
    }
    const layout = {
      // The top margin holds plotly's toolbar, so the legend below it never covers it.
      margin: { l: 60, r: 10, t: 34, b: 45 },
      xaxis: { title: { text: "t (continuized time)" }, zeroline: false },
      yaxis: { title: { text: runKind(snap).axis }, type: "log",
        exponentformat: "power",
        range: yRange(snap), autorange: yRange(snap) ? false : true },
      legend: { x: 1, xanchor: "right", y: 1, yanchor: "top", bgcolor: "rgba(255,255,255,0.8)",
        font: { size: 11 } },
      shapes: shapes,
      annotations: snap.eps ? [{ xref: "paper", x: 1, y: Math.log10(snap.eps),
        text: "ε = " + fmt(snap.eps, 2), showarrow: false, xanchor: "right", yanchor: "bottom",
        font: { color: "#777", size: 11 } }] : [],
      uirevision: "keep",  // keep the user's zoom across updates
    };
    Plotly.react("error-chart", traces, layout,
      { displaylogo: false, responsive: true, displayModeBar: true });
  }

  function yRange(snap) {
    // From a few decades below eps up to just above the largest curve or bound (log10 units).
    const floor = floorOf(snap);
    if (!(floor > 0)) return null;
    let top = snap.eps;
    for (const run of snap.runs) {
      if (run.e0 && run.bound_factor) top = Math.max(top, run.e0 * run.bound_factor);
      for (const p of run.xy) if (p[1] > top) top = p[1];
    }
    return [Math.log10(floor), Math.log10(top) + 0.3];
  }

  function trimBand(band, eps) {
    // The band is computed until the bound is far below eps; drawing all of it would squash the
    // live curve. Keep it until its upper edge is a decade below eps.
    let end = band.t.length;
    if (eps) {
      const k = band.q95.findIndex((v) => v !== null && v < eps / 10);
      if (k > 0) end = Math.min(band.t.length, k + 1);
    }
    return { t: band.t.slice(0, end), q05: band.q05.slice(0, end), q95: band.q95.slice(0, end),
      runs: band.runs };
  }

  function hexAlpha(hex, a) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${a})`;
  }

  // ---- training: accuracy, loss and consensus of the average model, with the simulator's band

  // [column in a training row, chart, axis title, log axis]; a row is
  // [t, loss, accuracy, node_accuracy, consensus, wall] (train_measure.TrainPoint).
  const TRAIN_CHARTS = [
    ["accuracy", 2, "train-accuracy", "test accuracy of the average model", false],
    ["loss", 1, "train-loss", "training loss of the average model", true],
    ["consensus", 4, "train-consensus", "consensus (1/n)Σ|x_v − x̄|²", true],
  ];

  function trainXY(rows, col, epoch) {
    // Unknown figures (null) are left out, never drawn as 0; consensus 0 (a common start) has
    // no place on a log axis either. The hover gives the wall time since t = 0 too.
    const log = col !== 2;
    const kept = rows.filter((r) => r[col] !== null && (!log || r[col] > 0));
    return { x: kept.map((r) => r[0]), y: kept.map((r) => r[col]),
      customdata: kept.map((r) => (epoch && r[5] ? r[5] - epoch : null)) };
  }

  function buildTraining(snap) {
    const panel = $("training-panel");
    const train = snap.training;
    trainLive = -1;
    trainBandRuns = 0;
    if (!train) { panel.hidden = true; return; }
    panel.hidden = false;
    const band = train.band;
    trainBandRuns = band ? band.runs : 0;
    for (const [metric, col, id, axis, log] of TRAIN_CHARTS) {
      const traces = [];
      if (band) {
        // On a log axis a 0 (the consensus of a common start) has no place: left out.
        const pos = (v) => (log && !(v > 0) ? null : v);
        const q = { q05: band[metric].q05.map(pos), q50: band[metric].q50.map(pos),
          q95: band[metric].q95.map(pos) };
        traces.push({ x: band.t, y: q.q05, mode: "lines", line: { width: 0 },
          hoverinfo: "skip", showlegend: false, connectgaps: false });
        traces.push({ x: band.t, y: q.q95, mode: "lines", line: { width: 0 }, fill: "tonexty",
          fillcolor: hexAlpha(PALETTE[0], 0.15), name: `simulator 5–95% (${band.runs} runs)`,
          hoverinfo: "skip", connectgaps: false });
        traces.push({ x: band.t, y: q.q50, mode: "lines", name: "simulator median",
          line: { color: PALETTE[0], width: 1, dash: "dash" },
          hovertemplate: "t=%{x:.4g}<br>median=%{y:.4g}<extra></extra>" });
      }
      trainLive = traces.length;
      const xy = trainXY(train.curve, col, snap.epoch);
      traces.push({ x: xy.x, y: xy.y, customdata: xy.customdata, mode: "lines+markers",
        name: `live (${(train.algorithm || "").toUpperCase()})`,
        line: { color: PALETTE[1], width: 2 }, marker: { size: 5 },
        hovertemplate: `t=%{x:.4g}<br>wall=%{customdata:.1f} s<br>${metric}=%{y:.4g}` +
          "<extra></extra>" });
      const layout = {
        margin: { l: 60, r: 10, t: 30, b: 45 },
        title: { text: metric, font: { size: 13 } },
        xaxis: { title: { text: "t (gradient steps per node)" }, zeroline: false },
        yaxis: { title: { text: axis }, type: log ? "log" : "linear",
          exponentformat: "power", range: log ? undefined : [0, 1] },
        legend: { x: 1, xanchor: "right", y: log ? 1 : 0, yanchor: log ? "top" : "bottom",
          bgcolor: "rgba(255,255,255,0.8)", font: { size: 10 } },
        uirevision: "keep",
      };
      Plotly.react(id, traces, layout, { displaylogo: false, responsive: true });
    }
    drawTrainingNote(train);
  }

  function drawTrainingNote(train) {
    const last = train.curve.length ? train.curve[train.curve.length - 1] : null;
    const acc = last ? last[2] : train.accuracy;
    setText($("training-note"), `${train.model} on ${train.data} (${train.split}), ` +
      `${train.algorithm}: test accuracy ${acc === null ? "unknown" : fmt(acc, 4)}` +
      (last ? ` at t=${fmt(last[0], 5)}` : "") + "; simulator band: " +
      (train.band ? `${train.band.runs} runs to t=${fmt(train.band.t[train.band.t.length - 1])}` :
        train.band_status));
    const ag = train.agreement;
    const el = $("training-verdict");
    if (!ag || ag.typical === null) {
      setText(el, "accuracy against the simulator: unknown" + (ag ? ` (${ag.status})` : ""));
      setClass(el, "muted");
      return;
    }
    setText(el, `accuracy against the simulator: ${ag.typical ? "typical" : "ATYPICAL"} of ` +
      `its ${ag.null_runs} runs — ${Math.round(100 * ag.inside)}% of ${ag.points} points to ` +
      `t=${fmt(ag.t_max)} in the band (p=${fmt(ag.p_inside, 3)}), test error offset ` +
      `${ag.offset_decades === null ? "unknown" : fmt(ag.offset_decades, 3) + " decades"} ` +
      `(p=${ag.p_offset === null ? "–" : fmt(ag.p_offset, 3)})`);
    setClass(el, "muted " + (ag.typical ? "ok" : "warn"));
  }

  function drawTraining(rows) {
    const snap = dash.snapshot;
    if (trainLive < 0 || !snap.training) return;
    snap.training.curve.push(...rows);
    for (const [, col, id] of TRAIN_CHARTS) {
      const xy = trainXY(rows, col, snap.epoch);
      if (xy.x.length) {
        Plotly.extendTraces(id, { x: [xy.x], y: [xy.y], customdata: [xy.customdata] },
          [trainLive]);
      }
    }
    drawTrainingNote(snap.training);
  }

  const network = new window.GossipNetwork(document.getElementById("graph-chart"));

  function nodeValues() {
    const n = dash.snapshot.layout ? dash.snapshot.layout.x.length : 0;
    const values = new Array(n).fill(null);
    const names = new Array(n).fill("");
    for (const [id, row] of nodes) {
      if (id < n) { values[id] = row[F.value]; names[id] = row[F.name]; }
    }
    return [values, names];
  }

  function buildGraph(snap) {
    const [values, names] = nodeValues();
    network.build(snap.layout, levels, values, snap.dim > 1 ? "|x|" : "x");
    network.setValues(values, names);
  }

  // Only rows on screen are kept current (a 225-row table shows ~25 at a time); a row that
  // scrolls into view is brought up to date then.
  const rowObserver = new IntersectionObserver((entries) => {
    for (const entry of entries) {
      const id = Number(entry.target.dataset.node);
      const el = rowEls.get(id);
      if (!el || el.tr !== entry.target) continue;
      el.visible = entry.isIntersecting;
      if (el.visible && el.dirty) drawRow(id);
    }
  });

  function newRow(id) {
    const tr = document.createElement("tr");
    tr.dataset.node = String(id);
    const tds = [];
    for (let i = 0; i < 12; i++) { const td = document.createElement("td"); tr.appendChild(td); tds.push(td); }
    // Visible until the observer says otherwise, so the first drawing is never skipped.
    const el = { tr: tr, tds: tds, visible: true, dirty: true };
    rowEls.set(id, el);
    rowObserver.observe(tr);
    return el;
  }

  function buildTable(snap) {
    const body = document.querySelector("#nodes-table tbody");
    rowObserver.disconnect();
    body.textContent = "";
    rowEls = new Map();
    const ids = [...nodes.keys()].sort((a, b) => a - b);
    const frag = document.createDocumentFragment();
    for (const id of ids) frag.appendChild(newRow(id).tr);
    body.appendChild(frag);
    for (const id of ids) drawRow(id);
  }

  function ensureRow(id) {
    if (rowEls.has(id)) return;
    // A node that reported after the snapshot: insert its row in id order.
    const body = document.querySelector("#nodes-table tbody");
    const after = [...rowEls.keys()].filter((k) => k > id).sort((a, b) => a - b)[0];
    const el = newRow(id);
    body.insertBefore(el.tr, after === undefined ? null : rowEls.get(after).tr);
  }

  function drawRow(id) {
    const row = nodes.get(id);
    const el = rowEls.get(id);
    if (!row || !el) return;
    if (!el.visible) { el.dirty = true; return; }
    el.dirty = false;
    const t = el.tds;
    setText(t[0], String(id));
    setText(t[1], row[F.name]);
    setText(t[2], row[F.address]);
    setText(t[3], fmt(row[F.value], 6));
    COUNTER_COLS.forEach((name, i) => {
      setText(t[5 + i], fmtInt(row[F[name]]));
      if (name === "failed" || name === "rejected") setClass(t[5 + i], row[F[name]] > 0 ? "hot" : "");
    });
    setText(t[10], fmt(row[F.rtt_p50_ms], 3));
    setText(t[11], fmt(row[F.rtt_p99_ms], 3));
    drawAge(id);
  }

  function drawAge(id) {
    const row = nodes.get(id);
    const el = rowEls.get(id);
    const snap = dash.snapshot;
    if (!row || !el || !snap) return;
    const age = row[F.received] ? serverNow() - row[F.received] : null;
    setText(el.tds[4], age === null ? "–" : Math.max(0, age).toFixed(1));
    let cls = "";
    // After the run no node reports any more, on purpose: none is stale or dead then.
    if (row[F.final] || finished) cls = "final";
    else if (age === null || age > snap.alive_timeout) cls = "dead";
    else if (age > snap.stale_after) cls = "stale";
    setClass(el.tr, cls);
  }

  function buildRuns(snap) {
    const body = document.querySelector("#runs-table tbody");
    body.textContent = "";
    snap.runs.forEach((run, i) => {
      const tr = document.createElement("tr");
      tr.dataset.run = run.run_id;
      if (run.run_id === snap.live_run) tr.className = "current";
      const cells = [
        `<span class="swatch" style="background:${runColor(i)}"></span>${esc(run.run_id)}` +
          `<span class="run-state">${run.live ? liveLabel(finished) : ""}</span>`,
        esc((run.algorithm || "?").toUpperCase()), esc(run.graph), "", "", "", "",
        esc(run.band_status),
        `<a href="${api("api/runs/" + encodeURIComponent(run.run_id) + ".csv")}" download>CSV</a> · ` +
          `<a href="${api("api/runs/" + encodeURIComponent(run.run_id) + ".jsonl")}" download>JSONL</a>`,
      ];
      tr.innerHTML = cells.map((c) => `<td>${c}</td>`).join("");
      body.appendChild(tr);
      drawRunProgress(tr, run);
    });
  }

  // The progress columns of a run's row (points, t, error, t_eps): for the live run they follow
  // every batch's summary, the same figures as the header cards, so the two never disagree.
  function drawRunProgress(tr, run) {
    const td = tr.children;
    const training = !!(dash.snapshot && dash.snapshot.training);
    setText(td[3], String(run.points));
    setText(td[4], fmt(run.t));
    // A training run's rows: the average model's test accuracy and the t it reached its
    // target at (earlier runs from the runs directory kept neither: "–").
    setText(td[5], training ? fmt(run.accuracy, 4) : fmt(run.error, 3));
    setText(td[6], fmt(training ? run.t_target : run.t_eps));
    setClass(td[6], run.reached ? "ok" : "");
  }

  function liveLabel(over) { return over ? " (this run, over)" : " (live)"; }

  function updateLiveRun(summary) {
    const snap = dash.snapshot;
    const run = snap && snap.runs.find((r) => r.run_id === liveRun);
    if (!run) return;
    run.t = summary.t;
    run.error = summary.error;
    run.t_eps = summary.t_eps;
    run.reached = summary.reached;
    run.points = summary.points;
    if (summary.training) {
      run.accuracy = summary.training.accuracy;
      run.t_target = summary.t_target;
    }
    const tr = document.querySelector(`#runs-table tbody tr[data-run="${CSS.escape(liveRun)}"]`);
    if (tr) {
      drawRunProgress(tr, run);
      setText(tr.querySelector(".run-state"), liveLabel(summary.finished));
    }
  }

  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;",
      '"': "&quot;", "'": "&#39;" })[c]);
  }

  // ---- counters ----------------------------------------------------------------------------

  // What the run is after, as the state badge and the t card say it: "ε" for averaging,
  // "accuracy 0.9" or "error 1e-06" for a training run (its --json target).
  function targetName(summary) {
    const target = summary.target;
    if (!target) return "ε";
    return target.accuracy !== undefined ? `accuracy ${fmt(target.accuracy, 4)}` :
      `error ${fmt(target.error, 2)}`;
  }

  // A training run's cards: every figure is the server's headline (views.training_headline),
  // under the names of the --json summary, which are its figures once the run finished.
  function updateTrainingCounters(summary) {
    const done = summary.finished;
    const train = summary.training;
    setText($("c-teps"), summary.t_target !== null ?
      `${targetName(summary)} reached at t=${fmt(summary.t_target, 5)} ` +
        `(${fmt(summary.wall_s_target, 4)} s)` : `target ${targetName(summary)}`);
    setText($("c-accuracy"), fmt(train.accuracy, 4));
    setClass($("c-accuracy"), "value" + (summary.reached ? " ok" : ""));
    setText($("c-loss"), train.t === null ? "no scored point yet" :
      `at t=${fmt(train.t, 5)}${train.final_exact ? " (final reports)" : ""}; ` +
      `loss ${fmt(train.loss, 4)}, consensus ${fmt(train.consensus, 4)}`);
    const ach = summary.rate_per_node_achieved;
    const ask = summary.rate_per_node_asked;
    setText($("c-rate"), `${ach === null ? "–" : fmt(ach, 4)} / ${fmt(ask, 4)}`);
    setClass($("c-rate"), "value" + (ach !== null && ask > 0 && ach < 0.8 * ask ? " warn" : ""));
    setText($("c-rate-sub"), "gradient steps, " + (done ? "whole run" : "so far"));
    const net = summary.rate_network_achieved;
    const netAsk = summary.rate_network_asked;
    setText($("c-network"), `${net === null ? "–" : fmt(net, 4)} / ${fmt(netAsk, 4)}`);
    setClass($("c-network"), "value" +
      (net !== null && netAsk > 0 && net < 0.8 * netAsk ? " warn" : ""));
    setText($("c-network-sub"), `${fmtInt(summary.activations)} exchanges` +
      (done ? ", whole run" : net === null ? ", rate measured after 1 s" : ", last 5 s"));
    const fresh = summary.freshness;
    setText($("c-fresh"), fresh.point_age_s === null ? "none yet" :
      `${fresh.point_age_s.toFixed(1)} s`);
    setText($("c-fresh-sub"), fresh.report_age_s === null ?
      (summary.nodes_final ? "every node sent its final report" : "no report yet") :
      `oldest node report ${fresh.report_age_s.toFixed(1)} s old`);
  }

  function updateCounters(summary, counters) {
    setText($("c-t"), fmt(summary.t, 5));
    // Every figure below comes from the server's headline (views.headline): while the run
    // goes on, the live measures; once it finished, the run summary's (what --json holds).
    if (summary.task === "training") updateTrainingCounters(summary);
    else updateGossipCounters(summary);
    updateStatus(summary, counters);
  }

  function updateGossipCounters(summary) {
    const snap = dash.snapshot;
    setText($("c-teps"), summary.t_eps !== null ? `ε reached at t=${fmt(summary.t_eps, 5)}` :
      snap && snap.eps ? `target ε=${fmt(snap.eps, 2)}` : "");
    setText($("c-error"), fmt(summary.error, 3));
    setClass($("c-error"), "value" + (summary.reached ? " ok" : ""));
    const run = snap && snap.runs.find((r) => r.run_id === snap.live_run);
    if (run && run.theta && run.e0 && run.bound_factor && summary.t !== null) {
      setText($("c-bound"), "bound " + fmt(run.bound_factor * run.e0 * Math.exp(-run.theta * summary.t), 3));
    }
    const done = summary.finished;
    const ach = summary.rate_achieved;
    const ask = summary.rate_asked;
    setText($("c-rate"), `${ach === null ? "–" : fmt(ach, 3)} / ${fmt(ask, 4)}`);
    setClass($("c-rate"), "value" + (ach !== null && ask > 0 && ach < 0.8 * ask ? " warn" : ""));
    setText($("c-rate-sub"), `${fmtInt(summary.activations)} activations` +
      (done ? ", whole run" : ach === null ? ", rate measured after 1 s" : ", last 5 s"));
    // The drift shown is exact (the exact curve, or the final reports): a running estimate
    // mixes reports of different times and drifts by the exchanges in flight, so it would
    // raise alarms for healthy runs. Rounding alone stays far below the warning level.
    const drift = summary.mass_drift_rel;
    setText($("c-drift"), drift === null ? "unknown" : fmt(drift, 2));
    setClass($("c-drift"), "value" + (drift !== null && drift > DRIFT_WARN ? " warn" : ""));
    $("c-drift").title = summary.drift_source ? "from the " + summary.drift_source : "";
    setText($("c-mean"), drift === null ? "no exact point yet" : "from the " + summary.drift_source);
  }

  function updateStatus(summary, counters) {
    const done = summary.finished;
    if (done) {
      // After a clean stop no node is alive, by design: count the final reports instead.
      setText($("c-alive-label"), "nodes stopped (final report)");
      setText($("c-alive"), `${summary.nodes_final} / ${counters.expected}`);
      setClass($("c-alive"), "value" + (summary.nodes_final < counters.expected ? " warn" : " ok"));
    } else {
      setText($("c-alive-label"), "nodes alive");
      setText($("c-alive"), `${counters.nodes_alive} / ${counters.expected}`);
      setClass($("c-alive"), "value" + (counters.nodes_alive < counters.expected ? " warn" : " ok"));
    }
    setText($("c-stale"), `${counters.nodes_stale} stale, ${counters.registered} registered`);
    const b = counters.broker;
    const closed = done && !b.connected;  // the run is over: its broker link was closed with it
    setText($("c-broker"), !b.url ? "none" : b.connected ? "connected" :
      closed ? "closed" : "disconnected");
    setClass($("c-broker"), "value" + (!b.url || closed ? "" : b.connected ? " ok" : " bad"));
    setText($("c-broker-sub"), b.url ? `${b.kind} ${b.url}` + (b.reconnects ? `, ${b.reconnects} reconnects` : "") +
      (closed ? ", after the run" : b.last_error && !b.connected ? ` (${b.last_error})` : "") : "");
    const badge = $("state-badge");
    const reached = targetName(summary) + " reached";
    let state = summary.reached ? reached : counters.phase;
    let cls = summary.reached ? "ok" : counters.phase === "failed" ? "bad" :
      counters.phase === "running" ? "" : "warn";
    if (done) {
      state = "finished: " + (summary.reached ? reached : summary.stop_reason || "stopped");
      cls = summary.reached ? "ok" : summary.stop_reason === "diverged" ? "bad" : "warn";
    }
    setText(badge, state);
    setClass(badge, "badge " + cls);
    if (counters.message) badge.title = counters.message;
    const note = done ? `${nodes.size} of ${counters.expected} reported, ` +
      `${summary.nodes_final} final reports` : `${nodes.size} of ${counters.expected} reporting`;
    setText($("nodes-note"), note);
    finished = done;
  }

  // ---- membership: joins, leaves, declared-dead nodes and the views (membership epochs) -----

  function drawMembership(events) {
    // Rare (a few events per run): the table is rewritten whole.
    const body = document.querySelector("#membership-table tbody");
    dash.membership = events.length;
    setText($("membership-note"), events.length ? events.length + " event(s)" :
      "no joins or leaves");
    body.replaceChildren(...events.map((e) => {
      const tr = document.createElement("tr");
      tr.className = "membership-" + e.kind;
      const when = e.wall ? new Date(e.wall * 1000).toISOString().slice(11, 19) : "–";
      const cells = [when, e.kind, e.name || (e.node ?? "–"), e.view ?? "–",
        e.t === undefined ? "–" : fmt(e.t), e.members ?? "–", e.detail || ""];
      for (const c of cells) {
        const td = document.createElement("td");
        td.textContent = String(c);
        tr.appendChild(td);
      }
      return tr;
    }));
  }

  // ---- live batches ------------------------------------------------------------------------

  function applyBatch(batch) {
    if (!dash.snapshot || loading) {
      waiting.push(batch);
      // Without a snapshot for long (server restarting), keep only the latest few: the
      // snapshot that ends the wait holds everything older anyway.
      if (waiting.length > 64) waiting.splice(0, waiting.length - 64);
      return;
    }
    if (batch.seq <= dash.seq) return;
    if (batch.seq !== dash.seq + 1 || batch.run !== liveRun) {
      // A gap (missed batches) or another run: only a snapshot is trustworthy now.
      dash.seq = batch.seq;
      loadSnapshot();
      return;
    }
    dash.seq = batch.seq;
    dash.batches += 1;
    dash.clockOffset = batch.now - Date.now() / 1000;
    const p = pending || (pending = { points: [], exact: [], gap: [], train: [],
      nodes: new Set(), edges: null, counters: null, walls: [], arrived: performance.now() });
    // A training run's error curves are not drawn (its error chart is hidden).
    const errorCurves = !dash.snapshot.training;
    for (const pt of batch.points) if (errorCurves && pt[1] > 0) p.points.push(pt);
    for (const row of batch.opt || []) if (row[2] !== null && row[2] > 0) p.gap.push(row);
    for (const pt of batch.exact || []) if (errorCurves && pt[1] > 0) p.exact.push(pt);
    for (const row of batch.train || []) p.train.push(row);
    const newIds = [];
    for (const row of batch.nodes) {
      const id = row[F.id];
      if (!nodes.has(id)) newIds.push(id);
      nodes.set(id, row);
      p.nodes.add(id);
    }
    newIds.forEach(ensureRow);
    if (batch.edges) p.edges = batch.edges;
    if (batch.membership) drawMembership(batch.membership);
    p.counters = [batch.summary, batch.counters];
    if (batch.walls[1] !== null) p.walls.push([...batch.walls, ...batch.arrivals]);
    requestAnimationFrame(draw);
  }

  function drawPoints(points, exact, gap) {
    const snap = dash.snapshot;
    // One extendTraces for both curves: each call redraws the whole chart.
    const xs = [], ys = [], which = [];
    if (points.length) {
      xs.push(points.map((q) => q[0])); ys.push(points.map((q) => q[1]));
      which.push(runTrace.get(liveRun));
    }
    if (exact.length && exactTrace.has(liveRun)) {
      xs.push(exact.map((q) => q[0])); ys.push(exact.map((q) => q[1]));
      which.push(exactTrace.get(liveRun));
    }
    if (gap.length && gapTrace >= 0) {
      xs.push(gap.map((r) => r[0])); ys.push(gap.map((r) => r[2]));
      which.push(gapTrace);
    }
    if (which.length) Plotly.extendTraces("error-chart", { x: xs, y: ys }, which);
    if (!points.length) return;
    const run = snap.runs.find((r) => r.run_id === liveRun);
    if (theoryTrace >= 0 && run) {
      const tNow = points[points.length - 1][0];
      const gd = $("error-chart");
      const tEnd = gd.data[theoryTrace].x[1];
      if (tNow > tEnd) {  // extend the bound ahead of the curve, in steps, not every frame
        const th = theoryXY(run, tNow * 1.25);
        Plotly.restyle(gd, { x: [th.x], y: [th.y] }, [theoryTrace]);
      }
    }
  }

  function drawLater() {
    // Chart points are waiting and no batch came to draw them: draw them in a frame of their own.
    laterTimer = 0;
    if (!pending) pending = { points: [], exact: [], gap: [], train: [], nodes: new Set(),
      edges: null, counters: null, walls: [] };
    requestAnimationFrame(draw);
  }

  function draw() {
    const p = pending;
    if (!p) return;
    pending = null;
    const started = performance.now();
    const snap = dash.snapshot;
    if (p.points.length) chartPoints.push(...p.points);
    if (p.exact.length) chartExact.push(...p.exact);
    if (p.gap.length) chartGap.push(...p.gap);
    // Appending to the chart redraws all of its traces, which grows with the run; so the chart
    // is drawn at most once per five times its own last drawing time (and once a second),
    // keeping it under ~20% of the page's time on a slow machine. Points wait, never drop.
    const nowMs = performance.now();
    const due = chartPoints.length || chartExact.length || chartGap.length;
    if (due && runTrace.has(liveRun) && nowMs >= chartDue) {
      const batch = chartPoints, exact = chartExact, gap = chartGap;
      chartPoints = [];
      chartExact = [];
      chartGap = [];
      const t0 = performance.now();
      timed("chart", () => drawPoints(batch, exact, gap));
      chartDue = nowMs + Math.max(1000, 5 * (performance.now() - t0));
    } else if (due && !laterTimer) {
      laterTimer = setTimeout(drawLater, Math.max(0, chartDue - nowMs));
    }
    // A training point comes once per report period (2 s or more): drawn as it comes.
    if (p.train.length) timed("training", () => drawTraining(p.train));
    if (p.nodes.size && snap.layout) {
      timed("colors", () => {
        const [values, names] = nodeValues();
        network.setValues(values, names);
      });
      timed("table", () => { for (const id of p.nodes) drawRow(id); });
    }
    if (p.edges && snap.layout) {
      timed("edges", () => network.setLevels(p.edges));
      levels = p.edges.slice();
    }
    if (p.counters) timed("counters", () => updateCounters(p.counters[0], p.counters[1]));
    if (p.counters) updateLiveRun(p.counters[0]);
    const took = performance.now() - started;
    // Latency = from the node publishing its report to the frame that shows it: measured after
    // the browser has painted (the next frame), against the server's clock.
    requestAnimationFrame(() => {
      const now = serverNow();
      for (const [oldest, newest, oldestIn, newestIn] of p.walls) {
        // From publish to paint, and the dashboard's own part: from arrival at the coordinator.
        dash.latency.push({ newest: now - newest, oldest: now - oldest,
          newestServed: now - newestIn, oldestServed: now - oldestIn });
      }
      if (dash.latency.length > 20000) dash.latency.splice(0, 10000);
      dash.renderMs.push(took);
      if (dash.renderMs.length > 20000) dash.renderMs.splice(0, 10000);
    });
  }

  // Ages change with the clock, not with messages: refresh them once a second.
  setInterval(() => {
    for (const [id, el] of rowEls) {
      if (el.visible) drawAge(id); else el.dirty = true;
    }
  }, 1000);

  // ---- stream ------------------------------------------------------------------------------

  function connect() {
    source = new EventSource(api("api/stream"));
    const badge = $("link-badge");
    source.onopen = () => {
      setText(badge, "stream: live");
      setClass(badge, "badge ok");
      loadSnapshot();
    };
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {
        // Refused (401) or gone: a snapshot request tells which, and reconnects if it can.
        setText(badge, "stream: closed");
        setClass(badge, "badge bad");
        loadSnapshot();
        return;
      }
      setText(badge, "stream: reconnecting");
      setClass(badge, "badge warn");
    };
    source.addEventListener("batch", (ev) => applyBatch(JSON.parse(ev.data)));
    source.addEventListener("reset", () => {
      dash.snapshot = null;
      loadSnapshot();
    });
    source.addEventListener("band", () => loadSnapshot());
  }

  $("metrics-link").href = api("metrics");
  connect();
})();
