// quarry search page. Talks to POST /v1/search?stream=true on this origin
// (SPEC §7): NDJSON result lines, then one {"summary": …} line; errors are
// {"error", "code"[, "position"]}. No framework, no build step, no CDN: the
// charts are hand-written SVG.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const SVGNS = "http://www.w3.org/2000/svg";
  const PAGE = 100; // events or rows shown per "show more"
  const HIDDEN_FIELDS = new Set(["_raw", "_time", "_bkt", "_cd", "_si", "_serial"]);
  const COLORS = ["#4f86d9", "#e8833a", "#3aa55d", "#c9453c", "#8c63c9", "#8a6d3b", "#d16bb4", "#6b7280", "#b8b32e", "#2eb8b3",
    "#1f4e99", "#a8501a", "#1d6b38", "#8a241e", "#5a3a8f", "#d4a93a", "#9c3b80", "#374151", "#6d9c1f", "#137c78"];
  // color(j): the palette, then hues a golden angle apart, so no two of a
  // chart's series share a colour however many there are.
  function color(j) {
    if (j < COLORS.length) return COLORS[j];
    return `hsl(${Math.round((j * 137.508) % 360)} 62% ${j % 2 ? 38 : 54}%)`;
  }

  const S = {
    results: [], summary: null, columns: [], kind: null, shown: PAGE, rowsShown: PAGE,
    query: "", ctrl: null, started: 0, firstAt: 0, range: null, dirty: false, tab: null, userTab: false,
    hidden: new Set(), // chart series the legend turned off
  };

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const k of kids) if (k != null) e.append(k instanceof Node ? k : String(k));
    return e;
  }
  function svg(tag, attrs, ...kids) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const k of kids) if (k != null) e.append(k instanceof Node ? k : String(k));
    return e;
  }

  // _time is RFC 3339 with nanoseconds; Date keeps milliseconds.
  function parseTime(v) {
    if (typeof v === "number") return v * 1000;
    if (typeof v !== "string") return NaN;
    return Date.parse(v.replace(/(\.\d{3})\d+/, "$1"));
  }
  function fmtTime(ms, withMs) {
    if (!isFinite(ms)) return "";
    const d = new Date(ms);
    const p = (n, w) => String(n).padStart(w || 2, "0");
    let s = `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
    if (withMs) s += "." + p(d.getMilliseconds(), 3);
    return s;
  }
  function cell(v) {
    if (v == null) return "";
    if (Array.isArray(v)) return v.map(cell).join(", ");
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  }
  const isNum = (v) => v !== null && v !== "" && !Array.isArray(v) && typeof v !== "object" && isFinite(Number(v));

  // ---- time range -------------------------------------------------------
  const UNITS = { s: 1e3, m: 60e3, h: 3600e3, d: 86400e3 };
  function rangeOf(now) {
    const r = $("range").value;
    if (r === "all") return { earliest: "", latest: "", lo: NaN, hi: NaN };
    if (r === "abs") {
      const lo = $("from").value ? new Date($("from").value).getTime() : NaN;
      const hi = $("to").value ? new Date($("to").value).getTime() : NaN;
      return { earliest: isFinite(lo) ? new Date(lo).toISOString() : "", latest: isFinite(hi) ? new Date(hi).toISOString() : "", lo, hi };
    }
    if (r === "@d") {
      const d = new Date(now); d.setHours(0, 0, 0, 0);
      return { earliest: "@d", latest: "now", lo: d.getTime(), hi: now };
    }
    const m = /^-(\d+)([smhd])$/.exec(r);
    return { earliest: r, latest: "now", lo: now - Number(m[1]) * UNITS[m[2]], hi: now };
  }
  $("range").addEventListener("change", () => { $("abs").hidden = $("range").value !== "abs"; });

  // ---- tokens and state in the URL -------------------------------------
  const TOKEN_KEY = "quarry.searchToken";
  $("token").value = sessionStorage.getItem(TOKEN_KEY) || "";
  $("token").addEventListener("input", () => sessionStorage.setItem(TOKEN_KEY, $("token").value));

  function saveURL() {
    const u = new URL(location.href);
    u.search = "";
    u.searchParams.set("q", $("q").value);
    u.searchParams.set("range", $("range").value);
    if ($("range").value === "abs") { u.searchParams.set("from", $("from").value); u.searchParams.set("to", $("to").value); }
    for (const k of ["site", "preference"]) if ($(k).value) u.searchParams.set(k, $(k).value);
    history.replaceState(null, "", u);
  }
  function loadURL() {
    const p = new URLSearchParams(location.search);
    if (p.has("q")) $("q").value = p.get("q");
    if (p.has("range")) $("range").value = p.get("range");
    if (p.has("from")) $("from").value = p.get("from");
    if (p.has("to")) $("to").value = p.get("to");
    for (const k of ["site", "preference"]) if (p.has(k)) $(k).value = p.get(k);
    $("abs").hidden = $("range").value !== "abs";
    return p.has("q") && p.get("q").trim() !== "";
  }

  // ---- running a search -------------------------------------------------
  async function run() {
    if (S.ctrl) S.ctrl.abort();
    const q = $("q").value.trim();
    if (!q) return;
    saveURL();
    const now = Date.now();
    const range = rangeOf(now);
    Object.assign(S, { query: q, results: [], summary: null, columns: [], kind: null, shown: PAGE, rowsShown: PAGE, started: performance.now(), firstAt: 0, range, userTab: false, hidden: new Set() });
    $("error").hidden = true;
    $("summary").replaceChildren();
    const body = { query: q, allow_partial: $("allow-partial").checked };
    if (range.earliest) body.earliest = range.earliest;
    if (range.latest) body.latest = range.latest;
    if ($("preference").value.trim()) body.preference = $("preference").value.trim();
    if ($("site").value.trim()) body.site = $("site").value.trim();
    if ($("fresh").checked) body.fresh = true;
    const headers = { "Content-Type": "application/json" };
    if ($("token").value.trim()) headers.Authorization = "Bearer " + $("token").value.trim();
    const ctrl = new AbortController();
    S.ctrl = ctrl;
    $("stop").disabled = false;
    setStatus("searching…");
    render();
    try {
      const res = await fetch("/v1/search?stream=true", { method: "POST", headers, body: JSON.stringify(body), signal: ctrl.signal });
      if (!res.ok) {
        const j = await res.json().catch(() => ({ error: "HTTP " + res.status, code: "http_" + res.status }));
        showError(j, q);
        setStatus("");
        return;
      }
      if (!(res.headers.get("Content-Type") || "").includes("ndjson")) {
        // A server that does not stream: the whole answer at once.
        const j = await res.json();
        S.columns = j.fields || [];
        for (const r of j.results || []) addResult(r);
        S.summary = j.summary;
      } else {
        const reader = res.body.getReader();
        const dec = new TextDecoder();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (value) buf += dec.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf("\n")) >= 0) {
            const line = buf.slice(0, i);
            buf = buf.slice(i + 1);
            if (line.trim()) handleLine(JSON.parse(line), q);
          }
          schedule();
          if (done) break;
        }
        if (buf.trim()) handleLine(JSON.parse(buf), q);
      }
      const took = Math.round(performance.now() - S.started);
      setStatus(`${S.results.length} results in ${took} ms` + (S.firstAt ? ` (first after ${Math.round(S.firstAt)} ms)` : ""));
    } catch (e) {
      if (e.name === "AbortError") setStatus(`stopped after ${S.results.length} results`);
      else { setStatus(""); showError({ error: "search failed: " + e.message, code: "network" }, q); }
    } finally {
      if (S.ctrl === ctrl) { S.ctrl = null; $("stop").disabled = true; }
      render();
    }
  }

  function handleLine(o, q) {
    const keys = Object.keys(o);
    if ("summary" in o && keys.every(k => k === "summary" || k === "fields")) {
      // The summary line; a streamed | table also names its columns.
      S.summary = o.summary;
      if (Array.isArray(o.fields) && o.fields.length) S.columns = o.fields.slice();
      return;
    }
    if (keys.length <= 3 && "error" in o && "code" in o && !("_raw" in o)) { showError(o, q); return; }
    addResult(o);
  }
  function addResult(r) {
    if (!S.firstAt) S.firstAt = performance.now() - S.started;
    S.results.push(r);
    for (const k of Object.keys(r)) if (!S.columns.includes(k)) S.columns.push(k);
    if (!S.kind) S.kind = "_raw" in r ? "events" : "table";
    if (S.results.length % 500 === 0) setStatus(`${S.results.length} results so far…`);
  }
  function setStatus(t) { $("status").textContent = t; }

  // ---- errors: the message and a caret under the column -----------------
  function charIndexOfByte(s, byteOff) {
    const enc = new TextEncoder();
    let bytes = 0;
    for (let i = 0; i < s.length; i++) {
      if (bytes >= byteOff) return i;
      const cp = s.codePointAt(i);
      bytes += enc.encode(String.fromCodePoint(cp)).length;
      if (cp > 0xffff) i++;
    }
    return s.length;
  }
  function showError(j, q) {
    $("error").hidden = false;
    $("error-msg").textContent = (j.error || "error") + (j.code ? ` (${j.code})` : "");
    const pre = $("error-query");
    pre.replaceChildren();
    let pos = typeof j.position === "number" ? j.position : null;
    if (pos == null) {
      const m = /at column (\d+)/.exec(j.error || "");
      if (m) pos = Number(m[1]) - 1;
    }
    if (pos != null && q.indexOf("\n") < 0) {
      const ci = charIndexOfByte(q, pos);
      pre.append(el("span", { id: "error-query-text", text: q }), "\n",
        el("span", { id: "error-caret", "data-column": String(pos + 1), text: " ".repeat(ci) + "^" }));
      const ta = $("q");
      ta.focus();
      ta.setSelectionRange(ci, Math.min(ci + 1, ta.value.length));
    }
  }

  // ---- rendering ----------------------------------------------------------
  let pending = false;
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; render(); });
  }

  function chooseTab() {
    if (S.userTab) return;
    if (S.kind === "events") S.tab = "events";
    else if (S.kind === "table") S.tab = chartSpec() ? "chart" : "table";
  }

  function render() {
    chooseTab();
    const has = S.results.length > 0 || S.summary;
    $("tabs").hidden = !has;
    $("n-events").textContent = S.kind === "events" ? `(${S.results.length})` : "";
    $("n-rows").textContent = S.kind === "table" ? `(${S.results.length})` : "";
    for (const b of $("tabs").querySelectorAll("button")) {
      b.classList.toggle("active", b.dataset.tab === S.tab);
      b.disabled = (b.dataset.tab === "events" && S.kind === "table") || (b.dataset.tab === "table" && S.kind === "events") || (b.dataset.tab === "chart" && !chartSpec());
    }
    $("events-view").hidden = S.tab !== "events" || !has;
    $("table-view").hidden = S.tab !== "table" || !has;
    $("chart-view").hidden = S.tab !== "chart" || !has;
    renderTimeline();
    if (S.tab === "events") { renderFields(); renderEvents(); }
    if (S.tab === "table") renderTable();
    if (S.tab === "chart") renderChart();
    renderSummary();
  }
  for (const b of document.querySelectorAll("#tabs button")) {
    b.addEventListener("click", () => { S.tab = b.dataset.tab; S.userTab = true; render(); });
  }

  function renderSummary() {
    const s = S.summary;
    const box = $("summary");
    box.replaceChildren();
    if (!s) return;
    const b = s.buckets || {};
    box.append(el("span", { id: "sum-buckets", text: `buckets: ${b.total} total, ${b.successful} successful (${b.skipped} skipped by time), ${b.failed} failed, ${b.missing} missing` }),
      " · ", el("span", { id: "sum-peers", text: "peers: " + ((s.peers || []).join(", ") || "none") }),
      " · ", el("span", { id: "sum-generation", text: "generation " + s.generation + (s.site ? " (" + s.site + ")" : "") }),
      " · ", el("span", { text: `took ${s.took_ms} ms` }), " · ",
      el("span", { id: "sum-partial", class: s.partial ? "bad" : "ok", text: s.partial ? "PARTIAL" : "complete" }));
    if (s.site && !Array.from($("sites").options).some((o) => o.value === s.site)) $("sites").append(el("option", { value: s.site }));
    const reasons = [];
    for (const f of b.failures || []) reasons.push(`bucket ${f.bucket} on ${f.peer || "?"}: ${f.reason}`);
    for (const w of s.warnings || []) reasons.push(w);
    if (reasons.length) box.append(el("ul", { id: "sum-reasons" }, ...reasons.map((r) => el("li", { text: r }))));
  }

  // Timeline: matching events over the range, in evenly sized bins.
  const SPANS = [1e3, 5e3, 10e3, 30e3, 60e3, 300e3, 600e3, 1800e3, 3600e3, 3 * 3600e3, 12 * 3600e3, 86400e3, 7 * 86400e3, 30 * 86400e3, 365 * 86400e3];
  function renderTimeline() {
    const box = $("timeline");
    if (S.kind !== "events" || !S.results.length) { box.replaceChildren(); return; }
    const times = S.results.map((r) => parseTime(r._time)).filter(isFinite);
    let lo = S.range && isFinite(S.range.lo) ? S.range.lo : Math.min(...times);
    let hi = S.range && isFinite(S.range.hi) ? S.range.hi : Math.max(...times) + 1;
    const span = SPANS.find((s) => (hi - lo) / s <= 60) || SPANS[SPANS.length - 1];
    lo = Math.floor(lo / span) * span;
    const n = Math.max(1, Math.ceil((hi - lo) / span));
    const counts = new Array(n).fill(0);
    for (const t of times) { const i = Math.floor((t - lo) / span); if (i >= 0 && i < n) counts[i]++; }
    const W = Math.max(400, box.clientWidth - 4), H = 90, top = 8, bottom = 18, left = 40;
    const max = Math.max(1, ...counts);
    const bw = (W - left - 4) / n;
    const g = svg("svg", { width: W, height: H, id: "timeline-svg", "data-span-ms": span });
    g.append(svg("text", { x: 2, y: top + 8 }, String(max)), svg("text", { x: 2, y: H - bottom }, "0"));
    counts.forEach((c, i) => {
      const h = (c / max) * (H - top - bottom);
      const r = svg("rect", { class: "tbar", x: left + i * bw, y: H - bottom - h, width: Math.max(1, bw - 1), height: h, "data-count": c, "data-start": new Date(lo + i * span).toISOString() },
        svg("title", {}, `${fmtTime(lo + i * span)}: ${c} events`));
      g.append(r);
    });
    g.append(svg("text", { x: left, y: H - 4 }, fmtTime(lo)), svg("text", { x: W - 4, y: H - 4, "text-anchor": "end" }, fmtTime(lo + n * span)));
    box.replaceChildren(g);
  }

  // Field sidebar: top values of each field over the events received.
  function fieldStats() {
    const stats = new Map();
    for (const r of S.results) {
      for (const [k, v] of Object.entries(r)) {
        if (HIDDEN_FIELDS.has(k) || v == null || v === "") continue;
        let f = stats.get(k);
        if (!f) { f = { name: k, events: 0, values: new Map() }; stats.set(k, f); }
        f.events++;
        for (const x of Array.isArray(v) ? v : [v]) { const s = cell(x); f.values.set(s, (f.values.get(s) || 0) + 1); }
      }
    }
    return [...stats.values()].sort((a, b) => b.events - a.events || a.name.localeCompare(b.name));
  }
  function renderFields() {
    const box = $("fields");
    box.replaceChildren(el("div", { class: "hint", text: `fields of ${S.results.length} events` }));
    for (const f of fieldStats()) {
      const top = [...f.values.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, 10);
      const list = el("ol");
      for (const [v, c] of top) {
        const pct = (100 * c / S.results.length).toFixed(1);
        const a = el("a", { class: "fv", "data-field": f.name, "data-value": v, "data-count": c, title: `add ${f.name}=${v} to the search` }, v);
        a.addEventListener("click", () => addTerm(f.name, v));
        list.append(el("li", {}, a, " ", el("span", { class: "cnt", text: String(c) }), el("span", { class: "pct", text: ` (${pct}%)` })));
      }
      box.append(el("section", { class: "field", "data-field": f.name },
        el("h3", {}, f.name, el("span", { class: "hint", text: ` ${f.events} events, ${f.values.size} values` })), list));
    }
  }
  // addTerm puts field=value into the search part of the query (before the
  // first pipe outside quotes) and runs it again.
  function addTerm(field, value) {
    const q = $("q").value;
    let cut = q.length, inQ = false;
    for (let i = 0; i < q.length; i++) {
      const c = q[i];
      if (c === "\\" && inQ) { i++; continue; }
      if (c === '"') inQ = !inQ;
      else if (c === "|" && !inQ) { cut = i; break; }
    }
    const v = /^[\w.:\/@-]+$/.test(value) ? value : '"' + value.replace(/\\/g, "\\\\").replace(/"/g, '\\"') + '"';
    const head = q.slice(0, cut).trimEnd(), tail = q.slice(cut);
    $("q").value = (head ? head + " " : "") + field + "=" + v + (tail ? " " + tail : "");
    run();
  }

  function renderEvents() {
    const ol = $("events");
    ol.replaceChildren();
    for (const r of S.results.slice(0, S.shown)) {
      const meta = ["host", "source", "sourcetype", "index", "splunk_server"].filter((k) => r[k] != null).map((k) => `${k}=${cell(r[k])}`).join("  ");
      ol.append(el("li", { class: "event" }, el("div", { class: "t", text: fmtTime(parseTime(r._time), true) }),
        el("div", { class: "raw", text: cell(r._raw) }), el("div", { class: "meta", text: meta })));
    }
    $("more").hidden = S.results.length <= S.shown;
  }
  $("more").addEventListener("click", () => { S.shown += PAGE; render(); });
  $("more-rows").addEventListener("click", () => { S.rowsShown += PAGE; render(); });

  function renderTable() {
    const t = $("results-table");
    const cols = S.columns;
    t.tHead.replaceChildren(el("tr", {}, ...cols.map((c) => el("th", { text: c }))));
    const tb = t.tBodies[0];
    tb.replaceChildren();
    for (const r of S.results.slice(0, S.rowsShown)) {
      tb.append(el("tr", {}, ...cols.map((c) => {
        const v = c === "_time" ? fmtTime(parseTime(r[c])) : cell(r[c]);
        return el("td", { class: isNum(r[c]) ? "num" : "", text: v });
      })));
    }
    $("more-rows").hidden = S.results.length <= S.rowsShown;
  }

  // chartSpec: a timechart (rows keyed by _time) or a stats … by (some
  // non-numeric group columns and numeric value columns) gives a chart.
  function chartSpec() {
    if (S.kind !== "table" || !S.results.length) return null;
    const cols = S.columns;
    const numeric = cols.filter((c) => c !== "_time" && S.results.every((r) => r[c] == null || isNum(r[c])) && S.results.some((r) => r[c] != null));
    if (!numeric.length) return null;
    if (cols.includes("_time")) {
      return { kind: "time", series: numeric, labels: S.results.map((r) => fmtTime(parseTime(r._time))), keys: S.results.map((r) => cell(r._time)) };
    }
    let groups = cols.filter((c) => !numeric.includes(c));
    let values = numeric;
    if (!groups.length && cols.length >= 2) {
      // A numeric-looking group (status=200) still labels the bars: the
      // fields after the query's last "by", else the first column (stats …
      // by puts its groups first).
      const m = /\bby\s+([\w.]+(?:\s*,?\s*[\w.]+)*)\s*$/i.exec(S.query.split("|").pop().trim());
      const by = m ? m[1].split(/[\s,]+/).filter((c) => cols.includes(c)) : [];
      groups = by.length ? by : [cols[0]];
      values = numeric.filter((c) => !groups.includes(c));
    }
    if (!groups.length || !values.length) return null;
    const series = values.filter((c) => c !== "percent" || values.length === 1);
    return { kind: "category", series, labels: S.results.map((r) => groups.map((g) => cell(r[g])).join(" · ")), keys: S.results.map((r) => groups.map((g) => cell(r[g])).join(" · ")) };
  }

  function niceMax(v) {
    if (v <= 0) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }
  function renderChart() {
    const spec = chartSpec();
    const box = $("chart");
    if (!spec) { box.replaceChildren(el("p", { class: "hint", text: "no chart for these results (a timechart or stats … by draws one)" })); return; }
    const rows = S.results, n = rows.length;
    // Series the legend turned off are left out (S.hidden, by name); a
    // timechart of more than one series stacks its columns, so each span
    // stays one readable column whatever the number of series.
    const shown = spec.series.filter((s) => !S.hidden.has(s));
    const k = shown.length, stacked = spec.kind === "time" && k > 1;
    const W = Math.max(480, box.clientWidth - 8), H = 340, left = 56, right = 12, top = 12, bottom = 90;
    let max = 0;
    for (const r of rows) {
      let sum = 0;
      for (const s of shown) { const v = Number(r[s] || 0); sum += v; max = Math.max(max, v); }
      if (stacked) max = Math.max(max, sum);
    }
    const ymax = niceMax(max);
    const plotH = H - top - bottom, slot = (W - left - right) / n, bw = stacked ? Math.max(1, slot * 0.8) : Math.max(1, (slot * 0.8) / Math.max(1, k));
    const g = svg("svg", { width: W, height: H, id: "chart-svg", "data-kind": spec.kind, "data-ymax": ymax, "data-plot-height": plotH, "data-stacked": stacked });
    for (let i = 0; i <= 4; i++) {
      const y = top + plotH - (i / 4) * plotH;
      g.append(svg("line", { x1: left, x2: W - right, y1: y, y2: y, stroke: "#e3e6ec" }),
        svg("text", { x: left - 6, y: y + 4, "text-anchor": "end" }, String(+(ymax * i / 4).toPrecision(4))));
    }
    const every = Math.ceil(n / Math.max(1, Math.floor((W - left) / 90)));
    rows.forEach((r, i) => {
      let base = 0; // stacked: the height already drawn in this column
      shown.forEach((s, j) => {
        const v = Number(r[s] || 0);
        const h = (v / ymax) * plotH;
        const x = left + i * slot + slot * 0.1 + (stacked ? 0 : j * bw);
        g.append(svg("rect", { class: "bar", x, y: top + plotH - base - h, width: bw, height: h, fill: color(spec.series.indexOf(s)),
          "data-series": s, "data-key": spec.keys[i], "data-value": v }, svg("title", {}, `${spec.labels[i]} — ${s}: ${v}`)));
        if (stacked) base += h;
      });
      if (i % every === 0) {
        const x = left + i * slot + slot / 2;
        g.append(svg("text", { x, y: top + plotH + 14, "text-anchor": "end", transform: `rotate(-30 ${x} ${top + plotH + 14})` }, spec.labels[i]));
      }
    });
    g.append(svg("line", { x1: left, x2: W - right, y1: top + plotH, y2: top + plotH, stroke: "#3b4352" }));
    // The legend toggles a series on and off (click); a hidden one is
    // struck through and keeps its colour.
    const legend = el("div", { class: "legend" }, ...spec.series.map((s, j) => {
      const item = el("span", { class: S.hidden.has(s) ? "legend-item off" : "legend-item", "data-series": s, title: "show or hide " + s, role: "button", tabindex: "0" },
        el("i", { style: "background:" + color(j) }), s);
      const toggle = () => { if (S.hidden.has(s)) S.hidden.delete(s); else S.hidden.add(s); renderChart(); };
      item.addEventListener("click", toggle);
      item.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); toggle(); } });
      return item;
    }));
    box.replaceChildren(g, legend);
  }

  // ---- wiring ---------------------------------------------------------------
  $("search-form").addEventListener("submit", (e) => { e.preventDefault(); run(); });
  $("q").addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); run(); } });
  $("stop").addEventListener("click", () => { if (S.ctrl) S.ctrl.abort(); });
  window.addEventListener("resize", () => schedule());
  if (loadURL()) run(); else $("q").focus();
})();
