// Served as vendor/plotly.min.js when the plotly package is not installed (the dashboard
// extra): the page keeps its figures, tables and network view, and each chart's place says
// how to get the charts. The few calls dashboard.js makes keep the traces' data on the chart's
// element, as plotly does, so that its point counts stay right.
"use strict";

(function () {
  const NOTE = "Charts need plotly: pip install 'continuized-gossip[dashboard]'";

  function element(gd) {
    return typeof gd === "string" ? document.getElementById(gd) : gd;
  }

  function react(gd, traces) {
    const el = element(gd);
    if (!el) return Promise.resolve();
    el.data = traces.map((t) => Object.assign({}, t, { x: [...(t.x || [])], y: [...(t.y || [])] }));
    if (el.textContent !== NOTE) {
      el.textContent = NOTE;
      el.classList.add("muted");
    }
    return Promise.resolve(el);
  }

  function extendTraces(gd, update, indices) {
    const el = element(gd);
    if (!el || !el.data) return Promise.resolve();
    indices.forEach((i, k) => {
      for (const key of ["x", "y"]) {
        if (update[key] && el.data[i]) el.data[i][key].push(...update[key][k]);
      }
    });
    return Promise.resolve(el);
  }

  function restyle(gd, update, indices) {
    const el = element(gd);
    if (!el || !el.data) return Promise.resolve();
    indices.forEach((i, k) => {
      for (const key of ["x", "y"]) {
        if (update[key] && el.data[i]) el.data[i][key] = [...update[key][k]];
      }
    });
    return Promise.resolve(el);
  }

  window.Plotly = { react: react, extendTraces: extendTraces, restyle: restyle, noCharts: true };
})();
