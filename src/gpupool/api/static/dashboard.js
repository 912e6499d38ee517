// GPU-hours per team, drawn with uPlot: from the buckets of /api/v1/cost (the store's days, the
// demo's simulated hours) when there are records, else from /api/v1/teams samples taken since
// the page opened.
(function () {
  "use strict";
  const every = 2000;
  const times = [];
  const hours = new Map();  // team -> cumulative GPU-hours, one value per sample
  let last = null;
  let plot = null;
  let shape = "";

  function colour(team) {
    const el = document.querySelector(`.share[data-team="${CSS.escape(team)}"]`);
    return el ? el.style.background : "#888";
  }

  function draw() {
    const teams = [...hours.keys()].sort();
    const data = [times, ...teams.map((t) => hours.get(t))];
    const key = teams.join("\u0000");
    const target = document.getElementById("gpu-hours");
    if (!plot || key !== shape) {
      if (plot) plot.destroy();
      shape = key;
      plot = new uPlot({
        width: Math.max(target.clientWidth, 300), height: 220,
        series: [{}, ...teams.map((t) => ({ label: t, stroke: colour(t), width: 2 }))],
        axes: [{}, { label: "GPU-hours" }],
      }, data, target);
    } else {
      plot.setData(data);
    }
  }

  async function sample() {
    try {
      const response = await fetch("/api/v1/teams", { headers: { Accept: "application/json" } });
      if (!response.ok) return;
      const teams = await response.json();
      const now = Date.now() / 1000;
      const dt = last === null ? 0 : (now - last) / 3600;
      last = now;
      times.push(now);
      for (const team of teams) {
        if (!hours.has(team.name)) hours.set(team.name, times.slice(0, -1).map(() => 0));
      }
      for (const [name, series] of hours) {
        const team = teams.find((t) => t.name === name);
        const previous = series.length ? series[series.length - 1] : 0;
        series.push(previous + (team ? team.used_units : 0) * dt);
      }
      draw();
    } catch (error) {
      console.warn("gpu-hours sample failed", error);
    }
  }

  async function fromStore() {
    try {
      const response = await fetch("/api/v1/cost", { headers: { Accept: "application/json" } });
      if (!response.ok) return;
      const cost = await response.json();
      const teams = new Set(cost.buckets.flatMap((bucket) => Object.keys(bucket.gpu_hours)));
      times.length = 0;
      hours.clear();
      for (const team of teams) hours.set(team, []);
      for (const bucket of cost.buckets) {
        times.push(Date.parse(bucket.end) / 1000);
        for (const [team, series] of hours) {
          const previous = series.length ? series[series.length - 1] : 0;
          series.push(previous + (bucket.gpu_hours[team] || 0));
        }
      }
      draw();
    } catch (error) {
      console.warn("gpu-hours from the store failed", error);
    }
  }

  if (document.getElementById("gpu-hours").dataset.source === "store") {
    fromStore();
    setInterval(fromStore, 30 * every);
  } else {
    sample();
    setInterval(sample, every);
  }
})();
