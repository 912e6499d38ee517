// Congestion by class, drawn with uPlot from /api/v1/congestion: per bucket, the pending seconds
// each class imposed on other classes, stacked (each band is one causing class, the top line the
// total), and a table of the totals per class and queue. The series is the server's, so the plot
// shows the past the scheduler (or the demo) has counted, not only what this page has seen.
(function () {
  "use strict";
  const every = 2000;
  let plot = null;
  let shape = "";

  function colour(i) {
    return `hsl(${(i * 67 + 200) % 360} 60% 45%)`;
  }

  function stacked(series, classes) {
    // cumulative per class, so each line sits on the ones before it
    const sums = series.map(() => 0);
    return classes.map((name) =>
      series.map((point, i) => (sums[i] += (point.imposed_seconds[name] || 0) / 60)));
  }

  function draw(body) {
    const classes = [...new Set(body.series.flatMap((p) => Object.keys(p.imposed_seconds)))].sort();
    const times = body.series.map((p) => p.start);
    const data = [times, ...stacked(body.series, classes)];
    const target = document.getElementById("congestion-over-time");
    target.dataset.classes = classes.join(",");
    target.dataset.points = String(times.length);
    const key = classes.join("\u0000");
    if (!plot || key !== shape) {
      if (plot) plot.destroy();
      shape = key;
      plot = new uPlot({
        width: Math.max(target.clientWidth, 300), height: 220,
        series: [{}, ...classes.map((name, i) => ({
          label: name, stroke: colour(i), fill: colour(i).replace(")", " / 0.25)"), width: 1,
        }))],
        axes: [{}, { label: "minutes imposed (stacked)" }],
      }, data, target);
    } else {
      plot.setData(data);
    }
  }

  function cell(row, text) {
    const td = document.createElement("td");
    td.textContent = text;
    row.appendChild(td);
  }

  function table(body) {
    const target = document.getElementById("congestion");
    for (const old of target.querySelectorAll("tr[data-class]")) old.remove();
    for (const row of body.classes) {
      const tr = document.createElement("tr");
      tr.dataset.class = row.workload_class;
      tr.dataset.queue = row.queue;
      const causes = Object.entries(row.imposed_by_cause).sort((a, b) => b[1] - a[1]);
      cell(tr, row.workload_class);
      cell(tr, row.queue);
      cell(tr, (row.imposed_seconds / 60).toFixed(1));
      cell(tr, causes.length ? causes[0][0] : "-");
      cell(tr, (row.self_imposed_seconds / 60).toFixed(1));
      cell(tr, row.idle_gpu_hours.toFixed(2));
      cell(tr, row.contention_share === null ? "-" : `${Math.round(100 * row.contention_share)}%`);
      target.appendChild(tr);
    }
  }

  async function sample() {
    try {
      const response = await fetch("/api/v1/congestion", { headers: { Accept: "application/json" } });
      if (!response.ok) return;
      const body = await response.json();
      table(body);
      draw(body);
    } catch (error) {
      console.warn("congestion sample failed", error);
    }
  }

  sample();
  setInterval(sample, every);
})();
