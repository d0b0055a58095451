// alignmt-report: draws the charts, sorts the tables, runs the attention explorer.
"use strict";

const PLOT_CONFIG = { responsive: true, displaylogo: false };

function drawFigures() {
  const figures = JSON.parse(document.getElementById("figures").textContent);
  for (const [id, figure] of Object.entries(figures)) {
    Plotly.newPlot(id, figure.data, figure.layout, PLOT_CONFIG);
  }
}

// Tables: a click on a header sorts by that column (numbers as numbers, blanks last).
function sortValue(cell) {
  const raw = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
  if (raw === "") return null;
  const number = Number(raw);
  return Number.isNaN(number) ? raw : number;
}

function compare(x, y) {
  if (typeof x === "number" && typeof y === "number") return x - y;
  return String(x).localeCompare(String(y), undefined, { numeric: true });
}

function sortTable(table, column, header) {
  const ascending = header.dataset.order !== "asc";
  table.querySelectorAll("th").forEach((th) => delete th.dataset.order);
  header.dataset.order = ascending ? "asc" : "desc";
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  rows.sort((a, b) => {
    const x = sortValue(a.cells[column]);
    const y = sortValue(b.cells[column]);
    if (x === null || y === null) return (x === null) - (y === null);
    return ascending ? compare(x, y) : -compare(x, y);
  });
  rows.forEach((row) => body.appendChild(row));
}

function makeSortable() {
  document.querySelectorAll("table.sortable").forEach((table) => {
    table.querySelectorAll("thead th").forEach((th, column) => {
      th.addEventListener("click", () => sortTable(table, column, th));
    });
  });
}

// The explorer's data: gzipped JSON in base64, unpacked by the browser.
async function loadExplorerData(element) {
  const binary = atob(element.textContent.trim());
  const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return new Response(stream).json();
}

function text(tag, content, className) {
  const element = document.createElement(tag);
  element.textContent = content;
  if (className) element.className = className;
  return element;
}

class Explorer {
  constructor(data) {
    this.data = data;
    this.ui = {};
    for (const id of ["run-a", "run-b", "view", "gold", "search", "bucket", "sort", "sentence-list", "panels", "sentence-count"]) {
      this.ui[id] = document.getElementById(id);
    }
    this.selected = 0;
    data.runs.forEach((run, i) => {
      this.ui["run-a"].add(new Option(run.name, i));
      this.ui["run-b"].add(new Option(run.name, i));
    });
    this.ui["run-b"].value = data.runs.length > 1 ? "1" : "-1";
    const buckets = new Set(Object.values(data.testsets).flatMap((t) => t.bucket));
    for (const bucket of buckets) this.ui.bucket.add(new Option(bucket, bucket));
    for (const id of ["run-a", "run-b", "view", "gold"]) {
      this.ui[id].addEventListener("change", () => this.show());
    }
    for (const id of ["run-a", "bucket", "sort"]) {
      this.ui[id].addEventListener("change", () => this.refreshList());
    }
    this.ui.search.addEventListener("input", () => this.refreshList());
    this.refreshList();
  }

  run(which) {
    const i = Number(this.ui[which].value);
    return i >= 0 ? this.data.runs[i] : null;
  }

  testset(run) {
    return this.data.testsets[run.test];
  }

  matching() {
    const run = this.run("run-a");
    const test = this.testset(run);
    const query = this.ui.search.value.trim().toLowerCase();
    const bucket = this.ui.bucket.value;
    const hit = (i) =>
      [test.source[i], test.reference[i], run.hypothesis[i]].some((s) => s.toLowerCase().includes(query));
    const found = test.source.map((_, i) => i).filter((i) => (!bucket || test.bucket[i] === bucket) && (!query || hit(i)));
    const order = this.ui.sort.value;
    const key = {
      index: (i) => i,
      "bleu-ascending": (i) => run.bleu[i],
      "bleu-descending": (i) => -run.bleu[i],
      length: (i) => test.length[i],
    }[order];
    return found.sort((a, b) => key(a) - key(b) || a - b);
  }

  refreshList() {
    const run = this.run("run-a");
    const test = this.testset(run);
    const found = this.matching();
    const list = this.ui["sentence-list"];
    list.replaceChildren();
    for (const i of found) {
      const item = document.createElement("div");
      item.className = "item" + (i === this.selected ? " selected" : "");
      item.dataset.index = i;
      item.append(text("span", `#${i} · ${test.bucket[i]} · BLEU ${run.bleu[i].toFixed(1)}`, "tag"));
      item.append(document.createElement("br"), text("span", test.source[i]));
      item.addEventListener("click", () => this.select(i));
      list.append(item);
    }
    this.ui["sentence-count"].textContent = `${found.length} of ${test.source.length} sentences`;
    if (found.length && !found.includes(this.selected)) this.selected = found[0];
    this.show();
  }

  select(i) {
    this.selected = i;
    for (const item of this.ui["sentence-list"].children) {
      item.classList.toggle("selected", Number(item.dataset.index) === i);
    }
    this.show();
  }

  show() {
    const panels = this.ui.panels;
    for (const old of panels.querySelectorAll(".heatmap")) Plotly.purge(old);
    panels.replaceChildren();
    const a = this.run("run-a");
    const b = this.run("run-b");
    for (const run of b && b !== a ? [a, b] : [a]) panels.append(this.panel(run));
  }

  panel(run) {
    const i = this.selected;
    const panel = document.createElement("div");
    panel.className = "panel";
    panel.append(text("h3", run.name));
    const test = this.testset(run);
    if (run.test !== this.run("run-a").test) {
      panel.append(text("p", "This run was tested on other sentences.", "missing"));
      return panel;
    }
    const details = document.createElement("dl");
    const fields = [
      ["sentence", `#${i} (${test.length[i]} source words, ${test.bucket[i]})`],
      ["source", test.source[i]],
      ["reference", test.reference[i]],
      ["hypothesis", run.hypothesis[i]],
      ["sentence BLEU", run.bleu[i].toFixed(2)],
    ];
    if (test.gold[i]) fields.push(["gold alignment", test.gold[i]]);
    for (const [name, value] of fields) details.append(text("dt", name), text("dd", value));
    panel.append(details);
    const heatmap = document.createElement("div");
    heatmap.className = "heatmap";
    panel.append(heatmap);
    this.drawHeatmap(heatmap, run, i);
    return panel;
  }

  drawHeatmap(element, run, i) {
    const forced = this.ui.view.value === "forced";
    const weights = forced ? run.forced[i] : run.attention[i];
    if (!weights) {
      element.append(text("p", forced ? "No teacher-forced attention for this run." : "This model has no attention.", "missing"));
      return;
    }
    const rows = forced ? run.reference_tokens[i] : run.target_tokens[i];
    const columns = forced ? run.source_tokens[i].slice(0, -1) : run.source_tokens[i];
    const scale = this.data.scale;
    const z = rows.map((_, r) => columns.map((_, c) => weights[r * columns.length + c] / scale));
    const words = rows.map((row) => columns.map((column) => [row, column]));
    const traces = [
      {
        type: "heatmap",
        z: z,
        x: columns.map((_, c) => c),
        y: rows.map((_, r) => r),
        customdata: words,
        zmin: 0,
        zmax: 1,
        colorscale: [[0, "#000000"], [1, "#ffffff"]],
        showscale: false,
        xgap: 0.5,
        ygap: 0.5,
        hovertemplate: "%{customdata[0]} ← %{customdata[1]}<br>weight %{z:.2f}<extra></extra>",
      },
    ];
    const cells = run.gold_cells[i];
    if (forced && this.ui.gold.checked && cells) {
      traces.push({
        type: "scatter",
        mode: "markers",
        name: "gold",
        x: cells.map((cell) => cell[1]),
        y: cells.map((cell) => cell[0]),
        marker: {
          symbol: cells.map((cell) => (cell[2] ? "square-open" : "circle-open")),
          color: "#e4572e",
          size: 12,
          line: { width: 2 },
        },
        hoverinfo: "skip",
      });
    }
    const cell = Math.max(9, Math.min(22, Math.floor(640 / Math.max(rows.length, columns.length))));
    const font = Math.max(8, Math.min(12, cell - 2));
    const axis = (labels) => ({
      tickmode: "array",
      tickvals: labels.map((_, k) => k),
      ticktext: labels,
      tickfont: { size: font },
      showgrid: false,
      zeroline: false,
    });
    const layout = {
      width: columns.length * cell + 140,
      height: rows.length * cell + 140,
      margin: { l: 110, r: 20, t: 110, b: 20 },
      xaxis: { ...axis(columns), side: "top", tickangle: -60, constrain: "domain" },
      yaxis: { ...axis(rows), autorange: "reversed", scaleanchor: "x", constrain: "domain" },
      showlegend: false,
      hovermode: "closest",
    };
    Plotly.newPlot(element, traces, layout, { displaylogo: false, responsive: false });
  }
}

async function startExplorer() {
  const element = document.getElementById("explorer-data");
  if (!element) return;
  const status = document.getElementById("explorer-status");
  try {
    window.explorer = new Explorer(await loadExplorerData(element));
    status.textContent = "";
  } catch (error) {
    status.textContent = `The explorer could not start: ${error}`;
    throw error;
  }
  document.body.dataset.explorer = "ready";
}

drawFigures();
makeSortable();
startExplorer();
