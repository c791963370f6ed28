// icicle's web search page: the same-origin Globus Search API of `icicle serve`
// (POST /v1/index/ID/search), with the bearer token the user pastes (sessionStorage only).
// Built into the binary; no library, nothing from another origin.
"use strict";
(() => {
  const INDEX = document.querySelector('meta[name="icicle-index"]').content;
  const API = "/v1/index/" + encodeURIComponent(INDEX) + "/search";
  const TOKEN_KEY = "icicle-token";
  const SVG = "http://www.w3.org/2000/svg";
  const QUANTILES = ["p10", "p25", "p50", "p75", "p90", "p99"];
  const DAY = 86400;
  const KIB = 1024;
  // Size ranges, each counted by a one-bucket numeric_histogram facet: [low, high).
  const SIZES = [
    [0, KIB, "under 1 KiB"],
    [KIB, KIB ** 2, "1 KiB to 1 MiB"],
    [KIB ** 2, KIB ** 3, "1 MiB to 1 GiB"],
    [KIB ** 3, KIB ** 4, "1 GiB to 1 TiB"],
    [KIB ** 4, 2 ** 53, "1 TiB or more"],
  ];
  // Age ranges in seconds, [low, high): counted the same way over the chosen time.
  const AGES = [
    [0, DAY, "under a day"],
    [DAY, 30 * DAY, "a day to a month"],
    [30 * DAY, 365 * DAY, "a month to a year"],
    [365 * DAY, 3 * 365 * DAY, "1 to 3 years"],
    [3 * 365 * DAY, 200 * 365 * DAY, "over 3 years"],
  ];
  const TIMES = { mtime: "modified", atime: "accessed", ctime: "changed" };
  // The search page lists primary records (files and links), not aggregate records.
  const PRIMARY = { type: "match_any", field_name: "type", values: ["file", "link"] };

  const state = {
    q: "*",
    sort: "",
    offset: 0,
    limit: 20,
    now: Math.floor(Date.now() / 1000),
    ageField: "mtime",
    picked: { type: new Set(), uid: new Set(), gid: new Set(), size: new Set(), age: new Set(), year: new Set() },
  };

  const $ = (id) => document.getElementById(id);
  // Each view's generation: an answer to an older request is not shown. `data-done` on the
  // body counts the views shown (tests wait for it).
  let generation = 0;
  let done = 0;
  function shown() {
    done += 1;
    document.body.dataset.done = String(done);
  }

  /** An element with attributes and children (strings become text). */
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === false || v === null || v === undefined) continue;
      if (k === "text") e.textContent = v;
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  }

  /** An SVG element with attributes. */
  function svg(tag, attrs, ...kids) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    for (const k of kids) e.append(k);
    return e;
  }

  function token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  }

  function status(text, error) {
    const s = $("status");
    s.textContent = text;
    s.classList.toggle("error", !!error);
  }

  /** POST a GSearchRequest; the GSearchResult, or an Error with the server's message. */
  async function search(body) {
    const headers = { "Content-Type": "application/json" };
    const t = token();
    if (t) headers.Authorization = "Bearer " + t;
    const r = await fetch(API, { method: "POST", headers, body: JSON.stringify(body), credentials: "omit", cache: "no-store" });
    const v = await r.json().catch(() => null);
    if (!r.ok) {
      const why = v && v.message ? v.message : r.statusText;
      throw new Error(r.status === 401 ? "the token was refused (401): " + why : r.status + ": " + why);
    }
    return v;
  }

  function fmtBytes(n) {
    if (n === null || n === undefined) return "";
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let i = 0;
    let x = Number(n);
    while (x >= 1024 && i < units.length - 1) {
      x /= 1024;
      i += 1;
    }
    return i === 0 ? x + " B" : x.toFixed(1) + " " + units[i];
  }

  function fmtTime(secs) {
    if (secs === null || secs === undefined || Number.isNaN(secs)) return "";
    return new Date(secs * 1000).toISOString().slice(0, 16).replace("T", " ");
  }

  /** Seconds of a record's time: `raw.<name>` when there, else its date. */
  function seconds(c, name, q) {
    const raw = c.raw && c.raw[name];
    if (raw !== undefined && raw !== null) return q ? raw[q] : raw;
    const v = q ? c[name] && c[name][q] : c[name];
    const ms = Date.parse(v);
    return Number.isNaN(ms) ? null : Math.floor(ms / 1000);
  }

  // ---- routes ------------------------------------------------------------------------------

  function dirHash(path) {
    const parts = path.split("/").filter((p) => p !== "");
    return "#/dir/" + parts.map(encodeURIComponent).join("/");
  }

  function route() {
    const h = location.hash.replace(/^#/, "");
    const parts = h.split("/").filter((p, i) => i > 0 || p !== "");
    const view = parts[0] || "";
    $("search-view").hidden = view !== "";
    $("search-form").hidden = view !== "";
    $("aggregate-view").hidden = view === "";
    if (view === "user" || view === "group") return aggregatePage(view, decodeURIComponent(parts[1] || ""));
    if (view === "dir") return aggregatePage("dir", "/" + parts.slice(1).filter((p) => p !== "").map(decodeURIComponent).join("/"));
    if (view === "list") return listPage(parts[1] === "group" ? "group" : "user");
    document.title = "icicle search";
    return runSearch();
  }

  // ---- the search --------------------------------------------------------------------------

  function facetRequests() {
    const f = [
      { name: "type", field_name: "type", size: 10 },
      { name: "uid", field_name: "uid", size: 10 },
      { name: "gid", field_name: "gid", size: 10 },
    ];
    SIZES.forEach(([lo, hi], i) => f.push({ name: "size-" + i, type: "numeric_histogram", field_name: "size", size: 1, histogram_range: { low: lo, high: hi } }));
    AGES.forEach(([lo, hi], i) => {
      const r = { low: state.now - hi + 1, high: state.now - lo + 1 };
      f.push({ name: "age-" + i, type: "numeric_histogram", field_name: state.ageField, size: 1, histogram_range: r });
    });
    return f;
  }

  /** The post-facet filters of the picked facet values (each facet's values OR-ed). */
  function pickedFilters() {
    const out = [];
    const p = state.picked;
    for (const name of ["type", "uid", "gid"]) {
      if (p[name].size) out.push({ type: "match_any", field_name: name, values: [...p[name]] });
    }
    if (p.size.size) out.push({ type: "range", field_name: "size", values: [...p.size].map((i) => ({ from: SIZES[i][0], to: SIZES[i][1] - 1 })) });
    if (p.age.size) {
      const values = [...p.age].map((i) => ({ from: state.now - AGES[i][1] + 1, to: state.now - AGES[i][0] }));
      out.push({ type: "range", field_name: state.ageField, values });
    }
    if (p.year.size) {
      const values = [...p.year].map((y) => ({ from: y + "-01-01", to: y + "-12-31T23:59:59" }));
      out.push({ type: "range", field_name: state.ageField, values });
    }
    return out;
  }

  /** The request the result table shows (exposed for tests as `icicleRequest`). */
  function searchRequest() {
    const body = { q: state.q, advanced: true, filters: [PRIMARY], limit: state.limit, offset: state.offset, facets: facetRequests() };
    const post = pickedFilters();
    if (post.length) body.post_facet_filters = post;
    if (state.sort) {
      const [field_name, order] = state.sort.split(":");
      body.sort = [{ field_name, order }];
    }
    return body;
  }

  async function runSearch() {
    const gen = ++generation;
    const body = searchRequest();
    window.icicleRequest = body;
    status("Searching…");
    $("results").setAttribute("aria-busy", "true");
    const years = search({ q: state.q, advanced: true, filters: [PRIMARY], limit: 0, facets: [{ name: "year", type: "date_histogram", field_name: state.ageField, date_interval: "year" }] });
    years.catch(() => null);
    try {
      const res = await search(body);
      let yearBuckets = null;
      try {
        yearBuckets = (await years).facet_results[0].buckets;
      } catch (e) {
        yearBuckets = e;
      }
      if (gen !== generation) return;
      renderResults(res);
      renderFacets(res.facet_results || [], yearBuckets);
      status("");
    } catch (e) {
      if (gen !== generation) return;
      status("The search failed: " + e.message, true);
      $("results").querySelector("tbody").replaceChildren();
      $("summary").textContent = "";
    }
    $("results").removeAttribute("aria-busy");
    shown();
  }

  function pathCell(c) {
    const path = c.path || "";
    const cut = path.lastIndexOf("/");
    const dir = cut > 0 ? path.slice(0, cut) : "/";
    const td = el("td", { class: "path", "data-label": "Path" });
    td.append(el("a", { href: dirHash(dir), title: "The directory " + dir, text: path.slice(0, cut + 1) }), el("span", { text: path.slice(cut + 1) }));
    if (c.type && c.type !== "file") td.append(el("span", { class: "tag", text: " " + c.type }));
    return td;
  }

  function renderResults(res) {
    const rows = (res.gmeta || []).map((g) => {
      const c = (g.entries && g.entries[0] && g.entries[0].content) || {};
      const mt = seconds(c, "mtime");
      return el(
        "tr",
        { "data-subject": g.subject },
        pathCell(c),
        el("td", { "data-label": "Owner", "data-uid": c.uid }, el("a", { href: "#/user/" + c.uid, text: String(c.uid) })),
        el("td", { "data-label": "Group", "data-gid": c.gid }, el("a", { href: "#/group/" + c.gid, text: String(c.gid) })),
        el("td", { class: "num", "data-label": "Size", "data-bytes": c.size, title: c.size + " bytes", text: fmtBytes(c.size) }),
        el("td", { "data-label": "Modified", "data-seconds": mt, text: fmtTime(mt) }),
      );
    });
    $("results").querySelector("tbody").replaceChildren(...rows);
    const total = res.total || 0;
    const first = rows.length ? state.offset + 1 : 0;
    const s = $("summary");
    s.dataset.total = total;
    s.textContent = rows.length ? `Results ${first} to ${state.offset + rows.length} of ${total}` : `No results (${total} records match)`;
    $("prev").disabled = state.offset === 0;
    $("next").disabled = !res.has_next_page || state.offset + state.limit >= 10000;
  }

  /** One facet group: a fieldset of checkboxes, each with its count. */
  function facetGroup(name, legend, entries) {
    const fs = el("fieldset", { class: "facet", "data-facet": name }, el("legend", { text: legend }));
    for (const { value, label, count } of entries) {
      const id = "f-" + name + "-" + String(value).replace(/[^A-Za-z0-9_-]/g, "_");
      const box = el("input", { type: "checkbox", id, "data-facet": name, "data-value": value, "data-count": count, checked: state.picked[name].has(value) });
      box.addEventListener("change", () => {
        if (box.checked) state.picked[name].add(value);
        else state.picked[name].delete(value);
        state.offset = 0;
        runSearch();
      });
      const lab = el("label", { for: id }, el("span", { class: "value", text: label }), el("span", { class: "count", text: String(count) }));
      fs.append(el("div", { class: "choice" }, box, lab));
    }
    if (!entries.length) fs.append(el("p", { class: "none", text: "none" }));
    return fs;
  }

  function termEntries(buckets, name, label) {
    const entries = buckets.map((b) => ({ value: name === "type" ? String(b.value) : Number(b.value), label: label(b.value), count: b.count }));
    for (const v of state.picked[name]) if (!entries.some((e) => e.value === v)) entries.push({ value: v, label: label(v), count: 0 });
    return entries;
  }

  function renderFacets(results, years) {
    const by = Object.fromEntries(results.map((r) => [r.name, r.buckets || []]));
    const one = (name) => (by[name] && by[name][0] ? by[name][0].count : 0);
    const box = $("facets");
    const ageSel = el("select", { id: "age-field" }, ...Object.entries(TIMES).map(([k, v]) => el("option", { value: k, selected: k === state.ageField, text: v })));
    ageSel.addEventListener("change", () => {
      state.ageField = ageSel.value;
      state.picked.age.clear();
      state.picked.year.clear();
      state.offset = 0;
      runSearch();
    });
    const clear = el("button", { type: "button", id: "clear-facets", text: "Clear the choices" });
    clear.addEventListener("click", () => {
      Object.values(state.picked).forEach((s) => s.clear());
      state.offset = 0;
      runSearch();
    });
    const groups = [
      facetGroup("type", "Type", termEntries(by.type || [], "type", String)),
      facetGroup("uid", "Owner (uid)", termEntries(by.uid || [], "uid", String)),
      facetGroup("gid", "Group (gid)", termEntries(by.gid || [], "gid", String)),
      facetGroup("size", "Size", SIZES.map(([, , label], i) => ({ value: i, label, count: one("size-" + i) }))),
      el("div", { class: "age-choice" }, el("label", { for: "age-field", text: "Age of the time" }), ageSel),
      facetGroup("age", "Age (" + TIMES[state.ageField] + ")", AGES.map(([, , label], i) => ({ value: i, label, count: one("age-" + i) }))),
    ];
    if (Array.isArray(years)) {
      const list = years.filter((b) => b.count > 0).map((b) => ({ value: String(b.value).slice(0, 4), label: String(b.value).slice(0, 4), count: b.count }));
      list.reverse();
      groups.push(facetGroup("year", "Year (" + TIMES[state.ageField] + ")", list.slice(0, 12)));
    } else if (years) {
      groups.push(el("p", { class: "none", text: "Years: " + years.message }));
    }
    groups.push(clear);
    box.replaceChildren(...groups);
  }

  // ---- aggregate pages ---------------------------------------------------------------------

  const KIND_NAMES = { user: "User", group: "Group", dir: "Directory" };

  async function aggregatePage(kind, id) {
    const gen = ++generation;
    const view = $("aggregate-view");
    document.title = KIND_NAMES[kind] + " " + id + " · icicle";
    view.replaceChildren(el("p", { text: "Loading…" }));
    status("Loading " + KIND_NAMES[kind].toLowerCase() + " " + id + "…");
    const filters = [
      { type: "match_all", field_name: "kind", values: [kind] },
      { type: "match_all", field_name: "id", values: [id] },
    ];
    try {
      const res = await search({ q: "*", filters, limit: 1 });
      const g = res.gmeta && res.gmeta[0];
      const rec = g ? g.entries[0].content : null;
      const parts = [el("nav", { class: "crumbs", "aria-label": "Where" }, ...crumbs(kind, id)), el("h2", { id: "agg-title", text: KIND_NAMES[kind] + " " + id })];
      if (rec) parts.push(...recordParts(kind, id, rec));
      else parts.push(el("p", { class: "none", id: "no-record", text: "No aggregate record: none was made for it, or you may not see it." }));
      parts.push(searchLink(kind, id));
      if (kind === "dir") parts.push(await subdirs(id));
      if (gen !== generation) return;
      view.replaceChildren(...parts);
      status("");
      const h = $("agg-title");
      h.setAttribute("tabindex", "-1");
      h.focus();
    } catch (e) {
      if (gen !== generation) return;
      view.replaceChildren(el("p", { class: "error", text: e.message }));
      status("Loading failed: " + e.message, true);
    }
    shown();
  }

  function crumbs(kind, id) {
    const home = el("a", { href: "#/", text: "Search" });
    if (kind !== "dir") return [home, " / ", el("a", { href: "#/list/" + kind, text: KIND_NAMES[kind] + "s" })];
    const out = [home, " / ", el("a", { href: "#/dir/", text: "/" })];
    let at = "";
    for (const p of id.split("/").filter((x) => x !== "")) {
      at += "/" + p;
      out.push(" ", el("a", { href: dirHash(at), text: p + "/" }));
    }
    return out;
  }

  function searchLink(kind, id) {
    const b = el("button", { type: "button", id: "search-these", text: kind === "dir" ? "Search the files below " + id : "Search the files of " + kind + " " + id });
    b.addEventListener("click", () => {
      const quoted = '"' + (id === "/" ? "" : id) + '/*"';
      state.q = kind === "dir" ? "path:" + quoted : (kind === "user" ? "uid:" : "gid:") + id;
      Object.values(state.picked).forEach((s) => s.clear());
      state.offset = 0;
      $("q").value = state.q;
      location.hash = "#/";
    });
    return el("p", {}, b);
  }

  function statList(rec) {
    const s = rec.size || {};
    const items = [
      ["Files", rec.file_count, "files"],
      ["Total size", fmtBytes(s.total), "total"],
      ["Smallest", fmtBytes(s.min), "min"],
      ["Average", fmtBytes(s.average), "average"],
      ["Largest", fmtBytes(s.max), "max"],
    ];
    const dl = el("dl", { class: "stats", id: "agg-stats" });
    for (const [k, v, key] of items) dl.append(el("div", { "data-stat": key }, el("dt", { text: k }), el("dd", { text: String(v) })));
    return dl;
  }

  function recordParts(kind, id, rec) {
    const size = rec.size || {};
    const sizeSeries = [{ name: "size", label: "size", values: QUANTILES.map((q) => size[q]) }];
    const timeSeries = Object.keys(TIMES).map((t) => ({ name: t, label: TIMES[t], values: QUANTILES.map((q) => seconds(rec, t, q)) }));
    return [
      statList(rec),
      el("h3", { id: "size-chart-title", text: "Sizes: quantiles" }),
      el("div", { class: "chart-row" }, chart("size-chart", sizeSeries, fmtBytes, true), valuesTable("Size quantiles", sizeSeries, fmtBytes)),
      el("h3", { id: "time-chart-title", text: "Times: quantiles" }),
      el("div", { class: "chart-row" }, chart("time-chart", timeSeries, (v) => fmtTime(v).slice(0, 10), false), valuesTable("Time quantiles (UTC)", timeSeries, fmtTime)),
    ];
  }

  /** A table of the charted values (the chart's numbers for those who do not see it). */
  function valuesTable(caption, series, fmt) {
    const head = el("tr", {}, el("th", { scope: "col", text: "quantile" }), ...series.map((s) => el("th", { scope: "col", text: s.label })));
    const rows = QUANTILES.map((q, i) => el("tr", {}, el("th", { scope: "row", text: q }), ...series.map((s) => el("td", { text: fmt(s.values[i]) }))));
    return el("table", { class: "quantiles" }, el("caption", { text: caption }), el("thead", {}, head), el("tbody", {}, ...rows));
  }

  /** A line chart of quantiles: x the quantile, y the value (log scale when `log`). */
  function chart(id, series, fmt, log) {
    const W = 640;
    const H = 240;
    const L = 108;
    const R = 28;
    const T = 14;
    const B = 34;
    const all = series.flatMap((s) => s.values).filter((v) => v !== null && v !== undefined);
    const f = (v) => (log ? Math.log10(Number(v) + 1) : Number(v));
    let lo = all.length ? Math.min(...all.map(f)) : 0;
    let hi = all.length ? Math.max(...all.map(f)) : 1;
    if (log) lo = 0;
    if (hi === lo) hi = lo + 1;
    const x = (i) => L + ((W - L - R) * i) / (QUANTILES.length - 1);
    const y = (v) => T + (H - T - B) * (1 - (f(v) - lo) / (hi - lo));
    const label = series.map((s) => s.label + ": " + s.values.map((v, i) => QUANTILES[i] + " " + fmt(v)).join(", ")).join("; ");
    const g = svg("svg", { id, class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label });
    for (let k = 0; k <= 4; k += 1) {
      const v = lo + ((hi - lo) * k) / 4;
      const raw = log ? 10 ** v - 1 : v;
      const yy = T + (H - T - B) * (1 - k / 4);
      g.append(svg("line", { class: "grid", x1: L, x2: W - R, y1: yy, y2: yy }));
      const t = svg("text", { class: "tick", x: L - 6, y: yy + 4, "text-anchor": "end" });
      t.textContent = fmt(Math.round(raw));
      g.append(t);
    }
    QUANTILES.forEach((q, i) => {
      const t = svg("text", { class: "tick", x: x(i), y: H - 12, "text-anchor": "middle" });
      t.textContent = q;
      g.append(t);
    });
    series.forEach((s, si) => {
      const pts = s.values.map((v, i) => (v === null || v === undefined ? null : [x(i), y(v)])).filter(Boolean);
      g.append(svg("polyline", { class: "line s" + si, points: pts.map((p) => p.join(",")).join(" ") }));
      s.values.forEach((v, i) => {
        if (v === null || v === undefined) return;
        const c = svg("circle", { class: "pt s" + si, cx: x(i), cy: y(v), r: 4, "data-series": s.name, "data-q": QUANTILES[i], "data-value": v });
        const tip = svg("title", {});
        tip.textContent = s.label + " " + QUANTILES[i] + ": " + fmt(v);
        c.append(tip);
        g.append(c);
      });
    });
    const legend = el("ul", { class: "legend" }, ...series.map((s, si) => el("li", { class: "s" + si, text: s.label })));
    return el("figure", { class: "chart-box" }, g, series.length > 1 ? legend : null);
  }

  /** The directories right below `id` (among the aggregate records below it, largest first). */
  async function subdirs(id) {
    const prefix = id === "/" ? "/" : id + "/";
    const res = await search({ q: 'id:"' + prefix + '*"', advanced: true, filters: [{ type: "match_all", field_name: "kind", values: ["dir"] }], limit: 1000, sort: [{ field_name: "size", order: "desc" }] });
    const kids = (res.gmeta || []).map((g) => g.entries[0].content).filter((c) => c.id !== id && !c.id.slice(prefix.length).includes("/"));
    const sec = el("section", { class: "subdirs", "aria-labelledby": "subdirs-title" }, el("h3", { id: "subdirs-title", text: "Directories below" }));
    if (!kids.length) {
      sec.append(el("p", { class: "none", text: "No aggregate records of directories below." }));
      return sec;
    }
    sec.append(aggregateTable(kids, (c) => dirHash(c.id), "dir"));
    return sec;
  }

  function aggregateTable(records, link, kind) {
    const head = el("tr", {}, ...["Name", "Files", "Total size", "Median size", "Median modified"].map((h, i) => el("th", { scope: "col", class: i > 0 && i < 4 ? "num" : null, text: h })));
    const rows = records.map((c) =>
      el(
        "tr",
        { "data-id": c.id },
        el("td", { "data-label": "Name" }, el("a", { href: link(c), text: kind === "dir" ? c.id : KIND_NAMES[kind].toLowerCase() + " " + c.id })),
        el("td", { class: "num", "data-label": "Files", text: String(c.file_count) }),
        el("td", { class: "num", "data-label": "Total size", "data-bytes": c.size && c.size.total, text: fmtBytes(c.size && c.size.total) }),
        el("td", { class: "num", "data-label": "Median size", text: fmtBytes(c.size && c.size.p50) }),
        el("td", { "data-label": "Median modified", text: fmtTime(seconds(c, "mtime", "p50")) }),
      ),
    );
    return el("table", { class: "aggregates" }, el("thead", {}, head), el("tbody", {}, ...rows));
  }

  /** Users or groups, largest first. */
  async function listPage(kind) {
    const gen = ++generation;
    const view = $("aggregate-view");
    document.title = KIND_NAMES[kind] + "s · icicle";
    status("Loading…");
    try {
      const res = await search({ q: "*", filters: [{ type: "match_all", field_name: "kind", values: [kind] }], limit: 200, sort: [{ field_name: "size", order: "desc" }] });
      if (gen !== generation) return;
      const recs = (res.gmeta || []).map((g) => g.entries[0].content);
      const title = el("h2", { id: "agg-title", tabindex: "-1", text: KIND_NAMES[kind] + "s, largest first (" + res.total + ")" });
      view.replaceChildren(title, recs.length ? aggregateTable(recs, (c) => "#/" + kind + "/" + encodeURIComponent(c.id), kind) : el("p", { class: "none", text: "No aggregate records." }));
      status("");
      title.focus();
    } catch (e) {
      if (gen !== generation) return;
      view.replaceChildren(el("p", { class: "error", text: e.message }));
      status("Loading failed: " + e.message, true);
    }
    shown();
  }

  // ---- wiring ------------------------------------------------------------------------------

  function showToken() {
    const has = !!token();
    $("token-state").textContent = has ? "Searching with your token" : "Public records only (paste a token)";
    $("token-forget").disabled = !has;
  }

  function init() {
    $("search-form").addEventListener("submit", (e) => {
      e.preventDefault();
      state.q = $("q").value.trim() || "*";
      state.sort = $("sort").value;
      state.offset = 0;
      state.now = Math.floor(Date.now() / 1000);
      runSearch();
    });
    $("prev").addEventListener("click", () => {
      state.offset = Math.max(0, state.offset - state.limit);
      runSearch();
    });
    $("next").addEventListener("click", () => {
      state.offset += state.limit;
      runSearch();
    });
    $("per-page").addEventListener("change", () => {
      state.limit = Number($("per-page").value) || 20;
      state.offset = 0;
      runSearch();
    });
    $("token-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const t = $("token").value.trim();
      $("token").value = "";
      if (t) sessionStorage.setItem(TOKEN_KEY, t);
      $("token-box").open = false;
      showToken();
      route();
    });
    $("token-forget").addEventListener("click", () => {
      sessionStorage.removeItem(TOKEN_KEY);
      $("token-box").open = false;
      showToken();
      route();
    });
    // On a phone the facets start folded, below the search box.
    if (window.matchMedia("(max-width: 899px)").matches) $("facet-box").open = false;
    window.addEventListener("hashchange", route);
    showToken();
    route();
  }

  init();
})();
