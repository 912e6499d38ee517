// GPU utilisation and pending pods over time, drawn with uPlot from /api/v1/cluster samples taken
// every refresh since the page opened: the share of GPU units allocated, and how many pods wait,
// by what holds them (the categories of the pending_pods metric).
(function () {
  "use strict";
  const every = 2000;
  const times = [];
  const utilisation = [];
  const pending = new Map();  // category -> count per sample
  const plots = {};

  function chart(id, labels, series, unit) {
    const target = document.getElementById(id);
    const key = labels.join("\u0000");
    const data = [times, ...series];
    if (!plots[id] || plots[id].key !== key) {
      if (plots[id]) plots[id].plot.destroy();
      const plot = new uPlot({
        width: Math.max(target.clientWidth, 300), height: 200,
        series: [{}, ...labels.map((label, i) => ({ label, stroke: `hsl(${(i * 67) % 360} 60% 45%)`, width: 2 }))],
        axes: [{}, { label: unit }],
      }, data, target);
      plots[id] = { plot, key };
    } else {
      plots[id].plot.setData(data);
    }
  }

  async function sample() {
    try {
      const response = await fetch("/api/v1/cluster", { headers: { Accept: "application/json" } });
      if (!response.ok) return;
      const cluster = await response.json();
      times.push(Date.now() / 1000);
      const capacity = cluster.capacity_units || 0;
      utilisation.push(capacity ? (100 * cluster.allocated_units) / capacity : 0);
      for (const category of Object.keys(cluster.pending_by_reason)) {
        if (!pending.has(category)) pending.set(category, times.slice(0, -1).map(() => 0));
      }
      for (const [category, series] of pending) {
        series.push(cluster.pending_by_reason[category] || 0);
      }
      chart("utilisation", ["GPU units allocated %"], [utilisation], "%");
      const categories = [...pending.keys()].sort();
      chart("pending-over-time", categories, categories.map((c) => pending.get(c)), "pods");
    } catch (error) {
      console.warn("cluster sample failed", error);
    }
  }

  sample();
  setInterval(sample, every);
})();
