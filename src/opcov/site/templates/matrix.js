/* opcov op x backend matrix: renders the compact JSON in #matrix-data; search and filters; state in the URL hash.
   Row: [name, tag bitmask over D.tags, forward status per backend (one letter each, D.reg_codes; '-' no data),
   backward likewise, optional {backend index: 0 (probe skipped) or two letters per D.dtypes entry}]. */
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("matrix-data").textContent);
  var REG = {r: "registered", u: "unresolved", f: "fallback", m: "missing", n: "not_applicable", "-": "absent"};
  var REG_UI = {registered: ["\u2713", "registered", "ok"], unresolved: ["?", "unresolved", "unknown"],
    fallback: ["\u21aa", "fallback", "warn"], missing: ["\u2717", "missing", "fail"],
    not_applicable: ["\u2013", "n/a", "na"], absent: ["\u00b7", "no data", "none"]};
  var PROBE_UI = {pass: ["\u2713", "pass", "ok"], pass_low_precision: ["\u2248", "low precision", "ok"],
    mismatch: ["\u2260", "mismatch", "fail"], unsupported: ["\u2717", "unsupported", "fail"],
    error: ["\u2717", "error", "fail"], crash: ["\u2717", "crash", "fail"], timeout: ["\u29d6", "timeout", "fail"],
    not_comparable: ["~", "not comparable", "unknown"], no_reference: ["?", "no reference", "unknown"],
    skipped: ["\u2013", "skipped", "unknown"]};
  var SUMMARY_UI = {"probed: all pass": ["\u2713", "ok"], "probed: some pass": ["\u25d1", "warn"],
    "probed: none pass": ["\u2717", "fail"]};
  var $ = function (id) { return document.getElementById(id); };
  var form = $("filters"), tbody = document.querySelector("#matrix tbody"), count = $("count");
  var coreBit = D.tags.indexOf("core");
  coreBit = coreBit < 0 ? 0 : (1 << coreBit);

  function opt(sel, value, text) {
    var o = document.createElement("option"); o.value = value; o.textContent = text; sel.appendChild(o); return o;
  }
  function group(sel, label, values, textOf) {
    var g = document.createElement("optgroup"); g.label = label;
    values.forEach(function (v) { var o = document.createElement("option"); o.value = v; o.textContent = textOf(v); g.appendChild(o); });
    sel.appendChild(g);
  }
  D.namespaces.forEach(function (ns) { opt($("ns"), ns, ns); });
  D.tags.forEach(function (t) { opt($("tag"), t, t); });
  D.backends.forEach(function (b) { opt($("backend"), b.name, b.name); });
  D.dtypes.forEach(function (d) { opt($("dtype"), d, d); });
  if (!D.dtypes.length) { $("dtype").disabled = true; opt($("dtype"), "", "no probed data yet").selected = true; }
  if (!D.tags.length) { $("tag").disabled = true; $("core").disabled = true; }
  group($("status"), "registered evidence", ["registered", "unresolved", "fallback", "missing", "not_applicable", "absent"],
    function (s) { return REG_UI[s][1]; });
  if (D.dtypes.length) {
    group($("status"), "probed evidence, one dtype", D.probe_codes, function (s) { return PROBE_UI[s] ? PROBE_UI[s][1] : s; });
    group($("status"), "probed evidence, all dtypes", Object.keys(SUMMARY_UI), function (s) { return s; });
  }

  function esc(s) { return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/"/g, "&quot;"); }
  function href(name) {
    if (D.hrefs[name]) return D.hrefs[name];
    var i = name.indexOf("::");
    return "ops/" + name.slice(0, i) + "/" + name.slice(i + 2) + ".html";
  }

  /* The status of one cell: [key used by the status filter, icon, text, css class, title]. */
  function cell(row, bi, dir, dtype) {
    var pos = dir === "bwd" ? 1 : 0;
    var probed = row[4] && row[4][bi];
    if (probed) {
      if (dtype) {
        var code = probed.substr(2 * D.dtypes.indexOf(dtype), 2);
        if (code && code.charAt(pos) !== "-") {
          var st = D.probe_codes[code.charCodeAt(pos) - 97] || "unknown";
          var ui = PROBE_UI[st] || ["?", st, "unknown"];
          return [st, ui[0], ui[1], ui[2], "probed, " + dtype + ": " + st];
        }
      } else {
        var n = 0, ok = 0;
        for (var d = 0; d < D.dtypes.length; d++) {
          var c = probed.charAt(2 * d + pos);
          if (c === "-") continue;
          n++;
          var s = D.probe_codes[c.charCodeAt(0) - 97];
          if (s === "pass" || s === "pass_low_precision") ok++;
        }
        if (n) {
          var key = ok === n ? "probed: all pass" : ok ? "probed: some pass" : "probed: none pass";
          return [key, SUMMARY_UI[key][0], ok + "/" + n + " dtypes", SUMMARY_UI[key][1],
            "probed: " + ok + " of " + n + " dtypes pass"];
        }
      }
    }
    var reg = REG[row[dir === "bwd" ? 3 : 2].charAt(bi)];
    var u = REG_UI[reg], title = D.reg_labels[reg] || "not in this backend's data";
    var css = u[2];
    if (reg === "fallback" && D.backends[bi].fallback === false) { css = "fail"; title += " (disabled: the call raises)"; }
    return [reg, u[0], u[1], css, "registered evidence: " + title];
  }

  function state() {
    return {q: $("q").value.trim().toLowerCase(), ns: $("ns").value, tag: $("tag").value, core: $("core").checked,
      dir: $("dir").value, status: $("status").value, backend: $("backend").value, dtype: $("dtype").value};
  }

  function render() {
    var s = state(), tagBit = s.tag ? (1 << D.tags.indexOf(s.tag)) : 0;
    var bsel = s.backend ? D.backends.map(function (b) { return b.name; }).indexOf(s.backend) : -1;
    var out = [], shown = 0;
    for (var i = 0; i < D.ops.length; i++) {
      var row = D.ops[i], name = row[0];
      if (s.ns && name.slice(0, name.indexOf("::")) !== s.ns) continue;
      if (s.core && !(row[1] & coreBit)) continue;
      if (tagBit && !(row[1] & tagBit)) continue;
      if (s.q && name.toLowerCase().indexOf(s.q) < 0) continue;
      var cells = [];
      for (var b = 0; b < D.backends.length; b++) cells.push(cell(row, b, s.dir, s.dtype));
      if (s.status) {
        var hit = false;
        for (b = 0; b < cells.length; b++) if ((bsel < 0 || b === bsel) && cells[b][0] === s.status) hit = true;
        if (!hit) continue;
      }
      shown++;
      var h = "<tr><th scope=\"row\"><a href=\"" + esc(href(name)) + "\">" + esc(name) + "</a></th>";
      for (b = 0; b < cells.length; b++) {
        var c = cells[b];
        h += "<td class=\"st " + c[3] + "\" title=\"" + esc(c[4]) + "\"><span aria-hidden=\"true\">" + c[1] + "</span> " + esc(c[2]) + "</td>";
      }
      out.push(h + "</tr>");
    }
    tbody.innerHTML = out.join("");
    count.textContent = shown + " of " + D.ops.length + " ops shown (" + (s.dir === "bwd" ? "backward" : "forward") +
      (s.dtype ? ", probed dtype " + s.dtype : "") + ")";
    var hash = [];
    ["q", "tag", "dir", "status", "backend", "dtype"].forEach(function (k) {
      var v = k === "q" ? $("q").value.trim() : s[k];
      if (v && !(k === "dir" && v === "fwd")) hash.push(k + "=" + encodeURIComponent(v));
    });
    if (s.core) hash.push("core=1");
    if (s.ns !== "aten") hash.push("ns=" + encodeURIComponent(s.ns));
    try { history.replaceState(null, "", "#" + hash.join("&")); } catch (e) { /* some file:// settings forbid it */ }
  }

  function load() {
    var params = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      var i = kv.indexOf("=");
      if (i > 0) params[kv.slice(0, i)] = decodeURIComponent(kv.slice(i + 1));
    });
    $("ns").value = "ns" in params ? params.ns : (D.namespaces.indexOf("aten") >= 0 ? "aten" : "");
    ["q", "tag", "dir", "status", "backend", "dtype"].forEach(function (k) { if (k in params) $(k).value = params[k]; });
    $("core").checked = params.core === "1";
  }

  var timer = null;
  form.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(render, 80); });
  form.addEventListener("change", render);
  form.addEventListener("submit", function (e) { e.preventDefault(); render(); });
  load();
  render();
  document.documentElement.setAttribute("data-matrix-ready", String(Math.round(performance.now())));
})();
