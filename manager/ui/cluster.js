// quarry cluster page: polls the manager's JSON API every second and
// redraws. No framework, no build step; everything here is served from the
// manager binary.
"use strict";
(function () {
  const POLL_MS = 1000;
  const BUCKETS_EVERY = 5; // the bucket list is read every 5th poll
  const BUCKETS_SHOWN = 200;
  const $ = (id) => document.getElementById(id);
  const state = { status: null, managers: null, gens: null, tasks: null, buckets: null, polls: 0, lastOK: 0 };

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const k of kids) if (k != null) e.append(k instanceof Node ? k : String(k));
    return e;
  }
  const yes = (b) => el("span", { class: b ? "ok" : "bad", text: b ? "yes" : "no" });
  function bytes(n) {
    if (n == null || n === 0) return "—";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + u[i];
  }
  function ago(t) {
    if (!t) return "—";
    const s = Math.max(0, (Date.now() - Date.parse(t)) / 1000);
    if (s < 90) return Math.round(s) + " s ago";
    if (s < 5400) return Math.round(s / 60) + " min ago";
    return Math.round(s / 3600) + " h ago";
  }
  function fill(tbody, rows, cols, empty) {
    tbody.replaceChildren();
    if (!rows.length) { tbody.append(el("tr", {}, el("td", { colspan: cols, class: "hint", text: empty }))); return; }
    for (const r of rows) tbody.append(r);
  }

  // Reads carry the token typed below when there is one: a manager started
  // with --read-token answers reads only with it or the admin token.
  async function getJSON(path) {
    const token = ($("token").value || "").trim();
    const r = await fetch(path, { cache: "no-store", headers: token ? { "Authorization": "Bearer " + token } : {} });
    if (r.status === 401) throw new Error(path + ": this manager needs a token for reads: type its read token or the admin token below");
    if (!r.ok) throw new Error(path + ": HTTP " + r.status);
    return r.json();
  }

  function policy(cfg) {
    if (!cfg) return ["", ""];
    if (cfg.sites && cfg.sites.length) return ["site RF " + cfg.site_replication_factor, "site SF " + cfg.site_search_factor];
    return ["RF=" + cfg.replication_factor, "SF=" + cfg.search_factor];
  }

  function renderHeader() {
    const s = state.status;
    $("leader").textContent = s.leader || "none";
    $("leader").className = s.leader ? "" : "bad";
    $("generation").textContent = s.generation;
    const mb = $("maint-badge");
    mb.textContent = s.maintenance ? "MAINTENANCE MODE" : "maintenance off";
    mb.className = s.maintenance ? "on" : "";
    const [rf, sf] = policy(s.config);
    const cards = [["valid", yes(s.valid)], ["complete", yes(s.complete)],
      ["replication factor met", yes(s.replication_factor_met)], ["search factor met", yes(s.search_factor_met)],
      ["policy", rf + " · " + sf], ["fixups waiting", String((s.fixups || []).length)]];
    $("health").replaceChildren(...cards.map(([k, v]) => el("div", { class: "card", "data-card": k }, el("div", { class: "k", text: k }), el("div", { class: "v" }, v))));
  }

  function lagCell(ps) {
    if (!ps) return el("span", { class: "hint", text: "—" });
    const lag = ps.replication_lag_blocks || {};
    const keys = Object.keys(lag).sort();
    if (!keys.length) return el("span", { class: "hint", text: "no hot targets" });
    const total = keys.reduce((a, k) => a + lag[k], 0);
    return el("span", { class: total ? "warn" : "ok", title: "blocks not yet acknowledged by each target",
      text: keys.map((k) => k + ": " + lag[k]).join(", ") });
  }

  function renderSites() {
    const s = state.status;
    const stats = s.peer_stats || null;
    const sites = Object.keys(s.sites || {}).sort((a, b) => (a === "site0") - (b === "site0") || a.localeCompare(b));
    const bySite = {};
    for (const p of s.peers || []) (bySite[p.site] = bySite[p.site] || []).push(p);
    for (const name of Object.keys(bySite)) if (!sites.includes(name)) sites.push(name);
    const out = [];
    for (const name of sites) {
      const st = (s.sites || {})[name];
      const box = el("div", { class: "site", "data-site": name });
      const head = el("h3", {}, name, " ");
      if (st) {
        head.append(" valid ", yes(st.valid), " · complete ", yes(st.complete));
        const inv = (st.invalid_buckets || []).length, inc = (st.incomplete_buckets || []).length;
        if (inv || inc) head.append(el("span", { class: "hint", text: ` (${inv} invalid, ${inc} incomplete buckets)` }));
      }
      if (name === "site0") head.append(el("span", { class: "hint", text: " — the site-less table (search heads with site0, no affinity)" }));
      box.append(head);
      const peers = bySite[name] || [];
      if (peers.length) {
        const t = el("table", { class: "peers" }, el("thead", {}, el("tr", {}, ...["peer", "state", "buckets", "primaries", "searchable", "disk used", "disk free", "replication lag (blocks)", "last heartbeat"].map((h) => el("th", { text: h })))));
        const tb = el("tbody");
        for (const p of peers) {
          const ps = stats && stats[p.id];
          tb.append(el("tr", { "data-peer": p.id },
            el("td", { text: p.id }),
            el("td", { class: "state state-" + p.state, "data-state": p.state, text: p.state }),
            el("td", { class: "num", text: p.buckets }), el("td", { class: "num", text: p.primaries }),
            el("td", { class: "num", text: p.searchable }),
            el("td", { class: "num", text: ps ? bytes(ps.bytes) : "—" }), el("td", { class: "num", text: ps ? bytes(ps.disk_free) : "—" }),
            el("td", {}, lagCell(ps)), el("td", { text: ps ? ago(ps.heard_at) : "—" })));
        }
        t.append(tb);
        box.append(t);
      }
      out.push(box);
    }
    if (!stats) out.push(el("p", { class: "hint", text: "Disk, replication lag and heartbeat times come with the peers' heartbeats, which only the leader receives: open the leader's page to see them." }));
    if (!(s.peers || []).length) out.push(el("p", { class: "hint", text: "no peers registered" }));
    $("sites").replaceChildren(...out);
  }

  // Search heads name their URL in their generation requests, which only
  // the leader serves: a follower's status has none (search_heads).
  function renderHeads() {
    const s = state.status;
    const heads = s.search_heads || {};
    const ids = Object.keys(heads).sort();
    const follower = state.managers && state.managers.leader !== state.managers.self;
    $("heads-note").textContent = follower && !ids.length
      ? "Search heads name their address to the leader only: open the leader's page to see them."
      : "each search head serves the search page at its URL";
    fill($("heads").tBodies[0], ids.map((id) => {
      const h = heads[id];
      return el("tr", { "data-head": id }, el("td", { text: id }), el("td", { text: h.site }),
        el("td", {}, el("a", { href: h.url + "/", rel: "noopener", text: h.url + "/" })),
        el("td", { title: h.heard_at, text: ago(h.heard_at) }));
    }), 4, follower ? "none known to this follower" : "none heard yet");
  }

  function renderGens() {
    const g = state.gens;
    if (!g) return;
    fill($("gens").tBodies[0], g.history.map((h) => el("tr", { "data-generation": h.generation },
      el("td", { class: "num", text: h.generation }), el("td", { title: h.seen_at, text: ago(h.seen_at) }),
      el("td", { text: h.changes.join("; ") }), el("td", { text: h.serving.join(" ") }))), 4, "none seen yet");
  }

  function renderFixups() {
    const s = state.status;
    const tasks = {};
    for (const t of (state.tasks && state.tasks.fixups) || []) tasks[t.id] = t;
    const rows = (s.fixups || []).map((f) => {
      let prog = "waiting for the planner (" + f.level + " level)";
      const t = f.task && tasks[f.task];
      if (t) {
        prog = "task #" + t.id + " " + t.kind;
        if (t.source) prog += " " + t.source;
        if (t.target) prog += " → " + t.target;
        prog += ", running for " + ago(new Date(t.created / 1e6).toISOString()).replace(" ago", "");
      } else if (f.task) prog = "task #" + f.task;
      return el("tr", { "data-bucket": f.bucket }, el("td", { text: f.bucket }), el("td", { text: f.level }),
        el("td", { text: f.reason }), el("td", { text: prog }));
    });
    fill($("fixups").tBodies[0], rows, 4, "none — every bucket meets its policy");
  }

  function renderManagers() {
    const m = state.managers;
    if (!m) return;
    fill($("managers").tBodies[0], m.managers.map((x) => el("tr", { "data-manager": x.id },
      el("td", { text: x.id + (x.id === m.self ? " (this page)" : "") }), el("td", { text: x.site || "" }),
      el("td", { text: x.raft_addr }),
      el("td", {}, x.http_addr ? el("a", { href: location.protocol + "//" + x.http_addr + "/", text: x.http_addr }) : ""),
      el("td", {}, yes(x.voter)), el("td", { text: x.leader ? "leader" : "follower" }))), 6, "none");
    const leader = m.managers.find((x) => x.leader);
    const note = $("leader-note");
    note.replaceChildren();
    const follower = m.leader !== m.self;
    for (const b of ["maint-on", "maint-off", "rebalance"]) $(b).disabled = follower;
    if (follower) {
      note.append("This manager is a follower: writes go to the leader. ");
      if (leader && leader.http_addr) note.append(el("a", { href: location.protocol + "//" + leader.http_addr + "/", text: "Open the leader's page (" + leader.id + ")" }));
      else note.append("No leader known yet.");
    }
  }

  function renderBuckets() {
    const b = state.buckets;
    if (!b) return;
    const shown = b.slice(0, BUCKETS_SHOWN);
    $("buckets-note").textContent = b.length > BUCKETS_SHOWN ? `${BUCKETS_SHOWN} of ${b.length} buckets shown (all in GET /v1/buckets)` : `${b.length} buckets`;
    fill($("buckets").tBodies[0], shown.map((x) => el("tr", { "data-bucket": x.id },
      el("td", { text: x.id }), el("td", { text: x.index }), el("td", { text: x.origin }),
      el("td", { text: x.hot ? "hot" : x.sealed ? "warm (sealed)" : "warm" }), el("td", { class: "num", text: x.events }),
      el("td", { class: "num", text: bytes(x.size) }),
      el("td", { text: (x.copies || []).map((c) => c.peer + (c.searchable ? "★" : "") + (c.corrupt ? " (corrupt)" : "")).join(" ") }),
      el("td", { text: Object.keys(x.primary || {}).sort().map((k) => k + "=" + x.primary[k]).join(" ") }))), 8, "no buckets");
  }

  function render() {
    if (!state.status) return;
    renderHeader(); renderSites(); renderHeads(); renderGens(); renderFixups(); renderManagers(); renderBuckets();
  }

  async function poll() {
    state.polls++;
    try {
      const reqs = [getJSON("/v1/status"), getJSON("/v1/managers"), getJSON("/v1/generations"), getJSON("/v1/fixups")];
      if (state.polls % BUCKETS_EVERY === 1) reqs.push(getJSON("/v1/buckets"));
      const [st, mg, gens, tasks, buckets] = await Promise.all(reqs);
      Object.assign(state, { status: st, managers: mg, gens: gens, tasks: tasks });
      if (buckets) state.buckets = Array.isArray(buckets) ? buckets : buckets.buckets || [];
      state.lastOK = Date.now();
      $("live").textContent = "live"; $("live").className = "live";
      $("updated").textContent = "updated " + new Date().toLocaleTimeString();
      render();
    } catch (e) {
      $("live").textContent = "not updating: " + e.message; $("live").className = "stale";
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  // Admin token: typed into the page, kept in sessionStorage (this tab only).
  const TOKEN_KEY = "quarry.adminToken";
  $("token").value = sessionStorage.getItem(TOKEN_KEY) || "";
  $("token").addEventListener("input", () => sessionStorage.setItem(TOKEN_KEY, $("token").value));
  $("forget").addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); $("token").value = ""; });

  async function write(path, body, what) {
    const out = $("action-result");
    const token = $("token").value.trim();
    if (!token) { out.className = "bad"; out.textContent = "Type the admin token first."; $("token").focus(); return; }
    out.className = ""; out.textContent = what + "…";
    try {
      const r = await fetch(path, { method: "POST", headers: { "Authorization": "Bearer " + token, "Content-Type": "application/json", "X-Request-Id": "page-" + Date.now() + "-" + Math.random().toString(36).slice(2) }, body: body ? JSON.stringify(body) : "", redirect: "manual" });
      if (r.type === "opaqueredirect" || r.status === 307) throw new Error("this manager is not the leader any more; open the leader's page");
      const j = await r.json().catch(() => ({}));
      if (!r.ok) throw new Error((j.error || "HTTP " + r.status) + (j.code ? " (" + j.code + ")" : ""));
      out.className = "ok"; out.textContent = what + ": done.";
    } catch (e) {
      out.className = "bad"; out.textContent = what + " failed: " + e.message;
    }
  }
  $("maint-on").addEventListener("click", () => write("/v1/maintenance", { enabled: true }, "Enable maintenance mode"));
  $("maint-off").addEventListener("click", () => write("/v1/maintenance", { enabled: false }, "Disable maintenance mode"));
  $("rebalance").addEventListener("click", () => write("/v1/rebalance", null, "Rebalance primaries"));

  try { state.status = JSON.parse($("initial-status").textContent); render(); } catch (e) { /* the first poll renders */ }
  poll();
})();
