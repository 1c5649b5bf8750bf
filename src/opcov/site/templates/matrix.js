/* opcov op x backend matrix: renders the compact JSON in #matrix-data; search, filters, sorting; the state
   lives in the URL hash (and follows it when it changes).
   Row: [name, tag bitmask over D.tags, forward status per backend (one letter each, D.reg_codes; '-' no data;
   'a' the op does not exist in that backend's torch, D.backends[i].torch),
   backward likewise, optional {backend index: 0 (probe skipped) or two letters per D.dtypes entry}].
   D.compile: the compile column family, one letter (D.reg_codes) per backend of D.compile.backends for each op.
   Every cell shows an icon and words (never colour alone) and names its evidence: probed cells per dtype,
   registered cells as a claim (blue, never the green of a probed pass), dtype-blind. Rows are drawn a page
   at a time (see paint). */
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("matrix-data").textContent);
  var REG = {"-": "absent", "a": "not_in_torch"};
  Object.keys(D.reg_codes).forEach(function (s) { REG[D.reg_codes[s]] = s; });
  var SUMMARY = {"probed: all pass": "P", "probed: some pass": "S", "probed: none pass": "X", "probed: unchecked": "C"};
  var KEYS = ["q", "ns", "tag", "core", "view", "path", "dir", "dtype", "status", "backend", "a", "b", "sort"];
  var $ = function (id) { return document.getElementById(id); };
  var form = $("filters"), table = $("matrix"), thead = table.querySelector("thead");
  var count = $("count"), coreBit = D.tags.indexOf("core"), ranked = null, rankedFor = null;
  coreBit = coreBit < 0 ? 0 : (1 << coreBit);
  var bnames = D.backends.map(function (b) { return b.name; });
  var CB = D.compile.backends;  /* the compile column family: backends with compile coverage */
  D.ops.forEach(function (r, i) { r.cmp = D.compile.codes[i] || ""; });
  if (!CB.length) { $("path").disabled = true; $("path").value = "eager"; }

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
  ["backend", "a", "b"].forEach(function (k) { bnames.forEach(function (b) { opt($(k), b, b); }); });
  D.dtypes.forEach(function (d) { opt($("dtype"), d, d); });
  if (!D.dtypes.length) { $("dtype").disabled = true; opt($("dtype"), "", "no probed data yet").selected = true; }
  if (!D.tags.length) { $("tag").disabled = true; $("core").disabled = true; }
  group($("status"), "registered evidence (a claim)", Object.keys(D.reg_codes).concat(["absent", "not_in_torch"]),
    function (s) { return s === "absent" ? "no data" : s === "not_in_torch" ? D.ui.sup.A[1] : D.ui.reg[s][1]; });
  if (D.dtypes.length) {
    group($("status"), "probed evidence, one dtype", D.probe_codes, function (s) { return D.ui.probe[s][1]; });
    group($("status"), "probed evidence, all dtypes", Object.keys(SUMMARY), function (s) { return s; });
  }

  function esc(s) { return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/"/g, "&quot;"); }
  /* An op's section on its page: ops/NS/FAMILY.html#NAME, its overloads, in-place and out forms sharing a
     page (opcov.site.render.default_op_href; D.hrefs lists the ops placed otherwise). */
  function href(name) {
    if (D.hrefs[name]) return D.hrefs[name];
    var i = name.indexOf("::"), rest = name.slice(i + 2), base = rest.split(".")[0];
    if (base.length > 1 && /_$/.test(base) && !/__$/.test(base)) base = base.slice(0, -1);
    return "ops/" + name.slice(0, i) + "/" + base + ".html#" + rest;
  }

  /* One cell: [status filter key, icon, text, css class, title, support letter]. */
  function cell(row, bi, dir, dtype, k) {
    if (dir === "cmp") return compileCell(row, bi, k);
    var pos = dir === "bwd" ? 1 : 0, probed = row[4] && row[4][bi], bn = bnames[bi];
    if (probed) {
      if (dtype) {
        var code = probed.substr(2 * D.dtypes.indexOf(dtype), 2);
        if (code && code.charAt(pos) !== "-") {
          var st = D.probe_codes[code.charCodeAt(pos) - 97] || "unknown", ui = D.ui.probe[st] || ["?", st, "unknown", st];
          return [st, ui[0], ui[1], ui[2], bn + ", probed, " + dtype + ": " + ui[3], D.sup_of_probe[st] || "C"];
        }
      } else {
        var n = 0, ok = 0, bad = 0;
        for (var d = 0; d < D.dtypes.length; d++) {
          var c = probed.charAt(2 * d + pos);
          if (c === "-") continue;
          var s = D.probe_codes[c.charCodeAt(0) - 97];
          if (s === "skipped") continue;
          n++;
          if (s === "pass" || s === "pass_low_precision") ok++;
          else if (D.sup_of_probe[s] === "X") bad++;
        }
        if (n) {
          var key = ok === n ? "probed: all pass" : ok ? "probed: some pass" : bad ? "probed: none pass" : "probed: unchecked";
          var sup = SUMMARY[key], u = D.ui.sup[sup];
          return [key, u[0], (sup === "C" ? "unchecked, " : "") + ok + "/" + n + " dtypes", u[2],
            bn + ", probed: passes in " + ok + " of " + n + " dtypes", sup];
        }
      }
    }
    var reg = REG[row[dir === "bwd" ? 3 : 2].charAt(bi)];
    if (reg === "absent") { var a = D.ui.sup["-"]; return ["absent", a[0], a[1], a[2], bn + ": not in this backend's data", "-"]; }
    if (reg === "not_in_torch") {
      var t = D.ui.sup.A, v = D.backends[bi].torch;
      return ["not_in_torch", t[0], t[1] + " " + v, t[2], bn + ": the op does not exist in torch " + v + " (the torch of its data)", "A"];
    }
    if (reg === "registered" && D.backends[bi].declared) {  /* listed in native_functions.yaml, no binary read */
      var e = D.ui.sup.D;
      return [reg, e[0], e[1] + (dtype ? ", any dtype" : ""), e[2], bn + ", declared evidence (a claim, dtype-blind): " + e[3], "D"];
    }
    var r = D.ui.reg[reg], css = r[2], title = bn + ", registered evidence (a claim, dtype-blind): " + r[3];
    if (reg === "fallback" && D.backends[bi].fallback === false) { css = "fail"; title += " (disabled: the call raises)"; }
    return [reg, r[0], r[1] + (dtype && reg === "registered" ? ", any dtype" : ""), css, title, D.sup_of_reg[reg]];
  }

  /* A compile column's cell: what the backend's torch.compile compiler accepts (its compile coverage, a claim). */
  function compileCell(row, bi, k) {
    var cb = CB[k], st = REG[row.cmp.charAt(k)], bn = bnames[bi] + " compile path (" + cb.compiler + ")";
    if (!st || st === "absent" || st === "not_in_torch") {
      var a = D.ui.sup["-"]; return ["absent", a[0], a[1], a[2], bn + ": not in its compile coverage", "-"];
    }
    if (st === "registered" && cb.evidence === "declared") {
      var e = D.ui.sup.D; return [st, e[0], e[1], e[2], bn + ", declared evidence (a claim, dtype-blind): " + e[3], "D"];
    }
    var r = D.ui.reg[st], css = r[2], title = bn + ", " + cb.evidence + " evidence (a claim, dtype-blind): " + r[3];
    if (st === "fallback" && D.backends[bi].fallback === false) { css = "fail"; title += " (disabled: the call raises)"; }
    return [st, r[0], r[1], css, title, D.sup_of_reg[st]];
  }

  function state() {
    var s = {};
    KEYS.forEach(function (k) { s[k] = k === "core" ? $(k).checked : k === "sort" ? table.getAttribute("data-sort") || "" : $(k).value; });
    s.q = s.q.trim();
    return s;
  }

  /* The columns of the chosen view: [header text, backend index, direction, dtype]. */
  function columns(s) {
    if (s.view === "dtypes") {
      var bi = Math.max(0, bnames.indexOf(s.backend)), out = [];
      var ds = D.backends[bi].probed && D.dtypes.length ? D.dtypes : [""];
      ds.forEach(function (d) {
        out.push([bnames[bi] + " " + (d || "any dtype") + " fwd", bi, "fwd", d]);
        out.push([bnames[bi] + " " + (d || "any dtype") + " bwd", bi, "bwd", d]);
      });
      return out;
    }
    var cols = s.path === "compile" && CB.length ? [] : bnames.map(function (b, bi) { return [b, bi, s.dir, s.dtype]; });
    if (s.path !== "eager") CB.forEach(function (c, k) { cols.push([c.name + " compile", c.i, "cmp", "", k]); });
    return cols;
  }

  function header(cols, sort) {
    var h = "<tr>", parts = sort.split(":"), key = parts[0], desc = parts[1] === "desc";
    [["op", "op"]].concat(cols.map(function (c, i) {
      var t = c[2] === "cmp" ? CB[c[4]].compiler + ", torch " + CB[c[4]].torch : D.backends[c[1]].torch ? "torch " + D.backends[c[1]].torch : "";
      return [String(i), c[0], t];
    })).forEach(function (c) {
      var on = key === c[0];
      h += "<th scope=\"col\"" + (on ? " aria-sort=\"" + (desc ? "descending" : "ascending") + "\"" : "") +
        "><button type=\"button\" data-sort=\"" + c[0] + "\">" + esc(c[1]) +
        (c[2] ? " <span class=\"ver\">" + esc(c[2]) + "</span>" : "") + "<span aria-hidden=\"true\">" +
        (on ? (desc ? " \u25be" : " \u25b4") : " \u21c5") + "</span><span class=\"sr\">, sort</span></button></th>";
    });
    thead.innerHTML = h + "</tr>";
  }

  function render() {
    var s = state(), tagBit = s.tag ? (1 << D.tags.indexOf(s.tag)) : 0;
    var bsel = bnames.indexOf(s.backend), ai = bnames.indexOf(s.a), bi2 = bnames.indexOf(s.b);
    var cols = columns(s), order = null, rankOf = null;
    if (s.q && ranked && rankedFor === s.q) {
      rankOf = {};
      ranked.forEach(function (m, k) { rankOf[m.name] = k; });
    }
    var rows = [];
    for (var i = 0; i < D.ops.length; i++) {
      var row = D.ops[i], name = row[0];
      if (s.ns && name.slice(0, name.indexOf("::")) !== s.ns) continue;
      if (s.core && !(row[1] & coreBit)) continue;
      if (tagBit && !(row[1] & tagBit)) continue;
      if (s.q && (rankOf ? !(name in rankOf) : name.toLowerCase().indexOf(s.q.toLowerCase()) < 0)) continue;
      if (ai >= 0 && bi2 >= 0 && ai !== bi2 && cell(row, ai, s.dir, s.dtype)[5] === cell(row, bi2, s.dir, s.dtype)[5]) continue;
      var cells = s.status || (s.sort && s.sort.split(":")[0] !== "op") ? cellsOf(row, cols) : null;  /* else when drawn */
      if (s.status) {
        var hit = false;
        for (var b = 0; b < cols.length; b++) if ((bsel < 0 || s.view === "dtypes" || cols[b][1] === bsel) && cells[b][0] === s.status) hit = true;
        if (!hit) continue;
      }
      rows.push([row, cells]);
    }
    var parts = s.sort.split(":"), key = parts[0], desc = parts[1] === "desc" ? -1 : 1;
    if (key && key !== "op") {
      var c = +key;
      rows.sort(function (x, y) {
        return desc * (D.sup_order.indexOf(x[1][c][5]) - D.sup_order.indexOf(y[1][c][5])) || (x[0][0] < y[0][0] ? -1 : 1);
      });
    } else if (key === "op") {
      if (desc < 0) rows.reverse();
    } else if (rankOf) {
      rows.sort(function (x, y) { return rankOf[x[0][0]] - rankOf[y[0][0]]; });
    }
    header(cols, s.sort);
    drawn = cols;
    paint(rows);
    count.textContent = rows.length + " of " + D.ops.length + " ops shown (" +
      (s.view === "dtypes" ? "dtype x direction view of " + cols[0][0].split(" ")[0] : (s.dir === "bwd" ? "backward" : "forward") +
      (s.dtype ? ", dtype " + s.dtype : "") + (cols.some(function (c) { return c[2] === "cmp"; }) ? "; compile columns: each backend's compile coverage" : "")) + (ai >= 0 && bi2 >= 0 && ai !== bi2 ? ", where " + s.a + " and " + s.b + " differ" : "") +
      (rankOf ? ", exact matches first" : "") + ")";
    var hash = [];
    KEYS.forEach(function (k) {
      var v = s[k];
      if (k === "core") { if (v) hash.push("core=1"); return; }
      if (k === "ns") { if (v !== "aten") hash.push("ns=" + encodeURIComponent(v)); return; }
      if (v && !(k === "dir" && v === "fwd") && !(k === "view" && v === "backends") && !(k === "path" && v === "both")) hash.push(k + "=" + encodeURIComponent(v));
    });
    var want = "#" + hash.join("&");
    if (location.hash !== want && !(want === "#" && !location.hash)) {
      try { history.replaceState(null, "", want); } catch (e) { /* some file:// settings forbid it */ }
    }
  }

  /* Rows as HTML: the first PAGE at once, more as the reader scrolls near the end of the box (or presses
     the button), so that a filter or a sort re-draws a few hundred rows, never thousands. */
  var PAGE = 200;
  function cellsOf(row, cols) { return cols.map(function (c) { return cell(row, c[1], c[2], c[3], c[4]); }); }
  var drawn = null;  /* the columns of the rows being drawn */
  function html(r) {
    if (!r[1]) r[1] = cellsOf(r[0], drawn);
    var name = r[0][0], h = "<tr><th scope=\"row\"><a href=\"" + esc(href(name)) + "\">" + esc(name) + "</a></th>";
    for (var j = 0; j < r[1].length; j++) {
      var ce = r[1][j];
      h += "<td class=\"st " + ce[3] + "\" title=\"" + esc(ce[4]) + "\"><span aria-hidden=\"true\">" + ce[1] + "</span> " + esc(ce[2]) + "</td>";
    }
    return h + "</tr>";
  }
  var paint = window.opcovSearch.pager(table, $("more"), PAGE, html, document.querySelector(".matrix-wrap"));

  /* The Python-name-aware ranking of the site search, when its index has loaded (search.js). */
  function rerank() {
    var q = $("q").value.trim();
    if (!q || !window.opcovSearch) { ranked = null; render(); return; }
    var done = false;
    window.opcovSearch.load(function (X) {
      if ($("q").value.trim() !== q) return;
      ranked = window.opcovSearch.rank(q).map(function (m) { return {name: X.ops[m.i][0]}; });
      rankedFor = q;
      done = true;
      render();
    });
    if (!done) render();  /* substring matches until the index has loaded */
  }

  function load() {
    var params = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      var i = kv.indexOf("=");
      if (i > 0) params[kv.slice(0, i)] = decodeURIComponent(kv.slice(i + 1));
    });
    $("ns").value = "ns" in params ? params.ns : (D.namespaces.indexOf("aten") >= 0 ? "aten" : "");
    KEYS.forEach(function (k) {
      if (k === "ns" || k === "core") return;
      if (k === "sort") { table.setAttribute("data-sort", params.sort || ""); return; }
      $(k).value = k in params ? params[k] : (k === "dir" ? "fwd" : k === "view" ? "backends" : k === "path" ? (CB.length ? "both" : "eager") : "");
    });
    $("core").checked = params.core === "1";
  }

  var timer = null;
  form.addEventListener("input", function (e) {
    clearTimeout(timer);
    timer = setTimeout(e.target.id === "q" ? rerank : render, 80);
  });
  form.addEventListener("change", function (e) { if (e.target.id === "q") rerank(); else render(); });
  form.addEventListener("submit", function (e) { e.preventDefault(); rerank(); });
  thead.addEventListener("click", function (e) {
    var btn = e.target.closest("button[data-sort]");
    if (!btn) return;
    var cur = (table.getAttribute("data-sort") || "").split(":"), key = btn.getAttribute("data-sort");
    table.setAttribute("data-sort", key + ":" + (cur[0] === key && cur[1] !== "desc" ? "desc" : "asc"));
    render();
    var again = thead.querySelector("button[data-sort=\"" + key + "\"]");
    if (again) again.focus();
  });
  window.addEventListener("hashchange", function () { load(); rerank(); });
  load();
  rerank();
  document.documentElement.setAttribute("data-matrix-ready", String(Math.round(performance.now())));
})();
