// sonde status page script. The pages work without it; with it they stay
// live: the parts marked data-live are re-read from the server every few
// seconds and after events, events arrive through the event stream (or by
// polling where a stream cannot be had), and the target view draws its
// timeline as SVG. What the script adds itself is built with createElement
// and textContent only, so names and error texts stay text; what it takes
// from a re-read page was escaped by the server's templates.
(function () {
  "use strict";

  var body = document.body;
  var page = body.dataset.page;
  var scopePool = body.dataset.pool || "";
  var scopeTarget = body.dataset.target || "";
  var since = Number(body.dataset.since || 0);
  var REFRESH_MS = 5000;
  var POLL_MS = 2000;
  var KINDS = ["state", "route", "preferred", "fail_open"];
  var SVG = "http://www.w3.org/2000/svg";
  var liveEl = document.getElementById("live");
  var streamState = "";
  var pageOK = true;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function svgEl(tag, attrs, parent) {
    var e = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, String(attrs[k])); });
    if (parent) parent.appendChild(e);
    return e;
  }

  // Clocks are UTC, as the server renders them and the pages label them.
  function two(n) { return n < 10 ? "0" + n : String(n); }
  function clock(d) { return two(d.getUTCHours()) + ":" + two(d.getUTCMinutes()) + ":" + two(d.getUTCSeconds()); }

  function showLive() {
    if (!liveEl) return;
    liveEl.hidden = false;
    var ok = pageOK && streamState !== "offline";
    liveEl.className = ok ? "live" : "live off";
    liveEl.textContent = !pageOK ? "sonde unreachable" : streamState === "polling" ? "live (polling)" : ok ? "live" : "offline";
  }

  // refresh re-reads url (the page itself by default) and replaces the
  // parts marked data-live with their new versions. Asked while a read is
  // in flight, it reads again once that one is in, the latest asked for: a
  // click on a page or an order while the page refreshes is never lost.
  var refreshing = false, again = null;
  function refresh(url) {
    if (refreshing) { again = url || ""; return Promise.resolve(); }
    refreshing = true;
    return fetch(url || location.href, { cache: "no-store", headers: { Accept: "text/html" } })
      .then(function (res) {
        if (!res.ok) throw new Error("HTTP " + res.status);
        return res.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        document.querySelectorAll("[data-live][id]").forEach(function (old) {
          var neu = doc.getElementById(old.id);
          if (neu) old.replaceWith(document.importNode(neu, true));
        });
        menuCounts(doc);
        labelFilters(doc);
        pageOK = true;
      })
      .catch(function () { pageOK = false; })
      .then(function () {
        refreshing = false;
        showLive();
        if (again !== null) {
          var next = again;
          again = null;
          return refresh(next || undefined);
        }
      });
  }

  // menuCounts takes the counts of the filter menus ("unhealthy (3)") from
  // a re-read page, which counted them with its table. The form itself is
  // kept: a choice or text being entered stays as it is.
  function menuCounts(doc) {
    var form = document.getElementById("filters"), neu = doc.getElementById("filters");
    if (!form || !neu) return;
    form.querySelectorAll("select").forEach(function (sel) {
      var other = neu.querySelector("select[name='" + sel.name + "']");
      if (!other) return;
      Array.prototype.forEach.call(sel.options, function (o) {
        var n = Array.prototype.find.call(other.options, function (x) { return x.value === o.value; });
        if (n) o.textContent = n.textContent;
      });
    });
  }

  // labelFilters takes the label filters of a re-read page when they are
  // not those the form was made with (a label's link was followed, or the
  // history moved): those being typed stay.
  function labelFilters(doc) {
    var cur = document.getElementById("label-filters"), neu = doc.getElementById("label-filters");
    if (cur && neu && cur.dataset.labels !== neu.dataset.labels) cur.replaceWith(document.importNode(neu, true));
  }

  var soon = 0;
  function refreshSoon() {
    if (soon) return;
    soon = setTimeout(function () { soon = 0; refresh(); }, 400);
  }

  // --- events -------------------------------------------------------------

  function inScope(e) {
    if (page === "target") return e.target === scopeTarget && (e.pools || []).indexOf(scopePool) >= 0;
    if (page === "pool") return (e.pools || []).indexOf(scopePool) >= 0;
    return true;
  }

  function eventRow(e) {
    var tr = el("tr", "ev fresh k-" + e.kind + " to-" + e.to);
    tr.dataset.seq = e.seq;
    var t = el("time", "clock");
    t.setAttribute("datetime", e.time);
    t.textContent = clock(new Date(e.time));
    var when = el("td");
    when.appendChild(t);
    tr.appendChild(when);
    tr.appendChild(el("td", "", e.kind));
    var target = el("td");
    if (e.target && e.pools && e.pools.length) {
      var a = el("a", "", e.target);
      a.href = "target?" + new URLSearchParams({ pool: e.pools[0], target: e.target }).toString();
      target.appendChild(a);
    } else {
      target.textContent = e.target || "";
    }
    if (e.host) {
      target.appendChild(document.createTextNode(" "));
      target.appendChild(el("span", "host", e.host));
    }
    tr.appendChild(target);
    tr.appendChild(el("td", "wide", (e.pools || []).join(", ")));
    var change = el("td", "chg");
    change.appendChild(el("span", "st st-" + e.from, e.from));
    change.appendChild(document.createTextNode(" → "));
    change.appendChild(el("span", "st st-" + e.to, e.to));
    tr.appendChild(change);
    var reason = e.reason || "";
    if (e.status) reason += " " + e.status;
    if (e.consecutive) reason += " ×" + e.consecutive;
    tr.appendChild(el("td", "", reason));
    tr.appendChild(el("td", "wide err", e.error || ""));
    return tr;
  }

  var eventsBody = document.querySelector("#recent tbody[data-events]");
  var keep = Number((document.getElementById("recent") || body).dataset.keep || 200);

  function addEvent(e) {
    if (e.seq <= since) return;
    since = e.seq;
    if (!inScope(e)) return;
    if (eventsBody) {
      var none = eventsBody.querySelector("tr.none");
      if (none) none.remove();
      var row = eventRow(e);
      filterRow(row);
      eventsBody.insertBefore(row, eventsBody.firstChild);
      while (eventsBody.rows.length > keep) eventsBody.deleteRow(eventsBody.rows.length - 1);
    }
    if (page !== "events") refreshSoon();
    if (page === "target") timelineSoon();
  }

  function warn(text) {
    var note = document.getElementById("stream-note") || document.querySelector("#recent");
    if (!note) return;
    note.parentNode.insertBefore(el("p", "warning", text), note);
  }

  function lost(n) { warn(n + " events were missed; reload the page for the current state."); }

  // restarted follows a daemon that numbers its events from 1 again: the
  // page's events after a restart have numbers below those it saw.
  function restarted(next) {
    since = next;
    warn("sonde restarted; events from before the restart may be missing.");
  }

  function poll() {
    streamState = "polling";
    showLive();
    fetch("api/v1/events?since=" + since + "&limit=1000", { cache: "no-store" })
      .then(function (res) {
        if (!res.ok) throw new Error("HTTP " + res.status);
        return res.json();
      })
      .then(function (p) {
        if (p.next < since) restarted(p.next);
        if (p.lost) lost(p.lost);
        p.events.forEach(addEvent);
        if (p.next > since && p.events.length === 0) since = p.next;
      })
      .catch(function () { streamState = "offline"; showLive(); })
      .then(function () { setTimeout(poll, POLL_MS); });
  }

  function follow() {
    if (!window.EventSource) { poll(); return; }
    var es = new EventSource("api/v1/events?since=" + since);
    KINDS.forEach(function (k) {
      es.addEventListener(k, function (m) { addEvent(JSON.parse(m.data)); });
    });
    es.addEventListener("lost", function (m) { lost(JSON.parse(m.data).lost); });
    es.addEventListener("reset", function (m) { restarted(JSON.parse(m.data).next); });
    es.onopen = function () { streamState = "stream"; showLive(); };
    es.onerror = function () {
      if (es.readyState === EventSource.CLOSED) { es.close(); poll(); return; }
      streamState = "offline";
      showLive();
    };
    window.addEventListener("pagehide", function () { es.close(); });
  }

  // --- events page filters ------------------------------------------------

  var evForm = document.getElementById("event-filters");
  function filterRow(tr) {
    if (!evForm || tr.classList.contains("none")) return;
    var kind = evForm.elements.kind.value, pool = evForm.elements.pool.value;
    var q = evForm.elements.q.value.trim().toLowerCase();
    var cells = tr.cells;
    var ok = (!kind || cells[1].textContent === kind) &&
      (!pool || cells[3].textContent.split(", ").indexOf(pool) >= 0) &&
      (!q || tr.textContent.toLowerCase().indexOf(q) >= 0);
    tr.classList.toggle("hidden", !ok);
  }
  if (evForm) {
    var refilter = function () { Array.prototype.forEach.call(eventsBody.rows, filterRow); };
    evForm.addEventListener("input", refilter);
    evForm.addEventListener("change", refilter);
    evForm.addEventListener("submit", function (ev) { ev.preventDefault(); refilter(); });
  }

  // --- pool view: filters, order and pages without reloading ----------------

  function navigate(url) {
    history.pushState(null, "", url);
    refresh(url);
  }

  var poolForm = document.getElementById("filters");
  if (poolForm) {
    var formURL = function () {
      var u = new URL(poolForm.getAttribute("action"), location.href);
      var cur = new URLSearchParams(location.search);
      new FormData(poolForm).forEach(function (v, k) {
        if (!v.trim() || k === "sort" || k === "desc") return;
        if (k === "label") u.searchParams.append(k, v); // repeatable, as in the API
        else u.searchParams.set(k, v);
      });
      ["sort", "desc"].forEach(function (k) { if (cur.get(k)) u.searchParams.set(k, cur.get(k)); });
      return u.toString();
    };
    var typing = 0;
    // A label filter the server would refuse (not NAME=VALUE) is shown as
    // such and not asked for.
    var apply = function () {
      if (!poolForm.checkValidity()) { poolForm.reportValidity(); return; }
      navigate(formURL());
    };
    poolForm.addEventListener("submit", function (ev) { ev.preventDefault(); apply(); });
    poolForm.addEventListener("change", apply);
    poolForm.addEventListener("input", function (ev) {
      if (ev.target.name !== "q") return;
      clearTimeout(typing);
      typing = setTimeout(function () { navigate(formURL()); }, 350);
    });
    document.addEventListener("click", function (ev) {
      var a = ev.target.closest && ev.target.closest("#members a[href^='pool?']");
      if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
      ev.preventDefault();
      navigate(a.href);
    });
    window.addEventListener("popstate", function () { refresh(location.href); });
  }

  // --- target view: the timeline --------------------------------------------

  var box = document.getElementById("timeline");
  var lastHistory = null;

  function niceMax(v) {
    if (!(v > 0)) return 0.001;
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * p >= v) return steps[i] * p;
    return 10 * p;
  }

  function latencyText(s) {
    if (s === 0) return "0";
    if (s < 0.001) return (s * 1e6).toPrecision(3) + " µs";
    if (s < 1) return (s * 1e3).toPrecision(3) + " ms";
    return s.toPrecision(3) + " s";
  }

  function drawTimeline(h) {
    lastHistory = h;
    var rs = h.results || [];
    box.textContent = "";
    if (!rs.length) {
      box.appendChild(el("p", "note", h.recorded ? "No results yet." :
        "sonde keeps the results of a limited number of targets; it keeps this one's from now on (up to " + h.capacity + ")."));
      return;
    }
    var W = Math.max(box.clientWidth - 24, 280), H = 190;
    var L = 56, R = 10, bandY = 4, bandH = 16, laneY = 24, laneH = 10, top = 44, bottom = H - 22;
    var times = rs.map(function (r) { return Date.parse(r.time); });
    var t0 = times[0], t1 = Math.max(times[times.length - 1], t0 + 1000);
    var step = times.length > 1 ? (t1 - t0) / (times.length - 1) : 1000;
    var tEnd = t1 + step;
    var x = function (t) { return L + (t - t0) / (tEnd - t0) * (W - L - R); };
    var svg = svgEl("svg", { viewBox: "0 0 " + W + " " + H, role: "img",
      "aria-label": "state and latency of the last " + rs.length + " results" });
    svg.setAttribute("data-results", String(rs.length));

    // State bands: one rectangle per run of results with the same state.
    var start = 0;
    for (var i = 1; i <= rs.length; i++) {
      if (i < rs.length && rs[i].state === rs[start].state) continue;
      var from = times[start], to = i < rs.length ? times[i] : tEnd;
      var band = svgEl("rect", { "class": "band " + rs[start].state, x: x(from), y: bandY,
        width: Math.max(x(to) - x(from), 1), height: bandH }, svg);
      svgEl("title", {}, band).textContent = rs[start].state + " from " + clock(new Date(from)) + " UTC" +
        " (" + (i - start) + " results)";
      start = i;
    }
    svgEl("text", { x: 4, y: bandY + 12 }, svg).textContent = "state";
    svgEl("text", { x: 4, y: laneY + 9 }, svg).textContent = "failures";

    // Latency of successful probes on a linear scale.
    var max = 0;
    rs.forEach(function (r) { if (r.outcome === "success") max = Math.max(max, r.latency_seconds); });
    max = niceMax(max);
    var y = function (s) { return bottom - (s / max) * (bottom - top); };
    [0, 0.5, 1].forEach(function (f) {
      var yy = y(max * f);
      svgEl("line", { "class": "grid", x1: L, x2: W - R, y1: yy, y2: yy }, svg);
      svgEl("text", { x: 4, y: yy + 4 }, svg).textContent = latencyText(max * f);
    });
    var pts = [];
    rs.forEach(function (r, i) {
      var xx = x(times[i]);
      var tip = clock(new Date(times[i])) + " UTC " + r.outcome + (r.status ? " " + r.status : "") +
        ", " + latencyText(r.latency_seconds) + ", then " + r.state;
      if (r.passive) {
        // Connections of this host that failed in a row: a trigger of
        // passive evidence, not a probe.
        var p = svgEl("polygon", { "class": "passive", points: [xx, laneY, xx + 4, laneY + laneH / 2, xx, laneY + laneH,
          xx - 4, laneY + laneH / 2].join(" ") }, svg);
        svgEl("title", {}, p).textContent = clock(new Date(times[i])) + " UTC connections of this host " +
          r.outcome + " (passive evidence), then " + r.state;
      } else if (r.outcome === "success") {
        pts.push(xx.toFixed(1) + "," + y(r.latency_seconds).toFixed(1));
        var c = svgEl("circle", { "class": "ok", cx: xx, cy: y(r.latency_seconds), r: 2.5 }, svg);
        svgEl("title", {}, c).textContent = tip;
      } else {
        var f = svgEl("rect", { "class": "fail", x: xx - 2, y: laneY, width: 4, height: laneH }, svg);
        svgEl("title", {}, f).textContent = tip;
      }
    });
    if (pts.length > 1) {
      var line = svgEl("polyline", { "class": "lat", points: pts.join(" ") });
      svg.insertBefore(line, svg.querySelector("circle"));
    }
    [t0, (t0 + tEnd) / 2, tEnd].forEach(function (t, i) {
      var anchor = ["start", "middle", "end"][i];
      svgEl("text", { x: x(t), y: H - 6, "text-anchor": anchor }, svg).textContent = clock(new Date(t));
    });
    box.appendChild(svg);
    var legend = el("p", "legend");
    [["healthy", "healthy"], ["unhealthy", "unhealthy"], ["unknown", "unknown"], ["ok", "latency of a success"],
      ["fail", "failed probe"], ["passive", "failed connections of this host (passive)"]].forEach(function (k) { legend.appendChild(el("span", "key " + k[0], k[1])); });
    legend.appendChild(el("span", "", rs.length + " of at most " + h.capacity + " results kept; times in UTC"));
    box.appendChild(legend);
  }

  var loadingTimeline = false;
  function loadTimeline() {
    if (!box || loadingTimeline) return;
    loadingTimeline = true;
    fetch(box.dataset.history, { cache: "no-store" })
      .then(function (res) {
        if (!res.ok) throw new Error("HTTP " + res.status);
        return res.json();
      })
      .then(drawTimeline)
      .catch(function () { pageOK = false; showLive(); })
      .then(function () { loadingTimeline = false; });
  }
  var timelineTimer = 0;
  function timelineSoon() {
    if (timelineTimer) return;
    timelineTimer = setTimeout(function () { timelineTimer = 0; loadTimeline(); }, 300);
  }

  // --- start ------------------------------------------------------------------

  showLive();
  follow();
  if (page === "overview" || page === "pool" || page === "target" || page === "discovery") {
    setInterval(function () { if (!document.hidden) refresh(); }, REFRESH_MS);
  }
  if (box) {
    var table = document.querySelector("details.results");
    if (table) table.open = false;
    loadTimeline();
    var every = Math.max(Number(box.dataset.interval || 5), 2) * 1000;
    setInterval(function () { if (!document.hidden) loadTimeline(); }, every);
    var resizing = 0;
    window.addEventListener("resize", function () {
      clearTimeout(resizing);
      resizing = setTimeout(function () { if (lastHistory) drawTimeline(lastHistory); }, 150);
    });
  }
})();
