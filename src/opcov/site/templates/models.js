/* opcov model index: renders the compact JSON in #models-data (written by 'opcov site', see
   opcov.site.render.models_index) and filters it by name, family, task, modality and the verdict a model gets
   on a backend and mode. The state lives in the URL hash. Rows are drawn a page at a time, so that the index
   of several hundred models stays quick.
   Model row: [name, page, family, task, modality (indices into D.facets), verdict letters: per backend in
   D.backends order, one per mode in D.modes order; '-' no op set or no data; D.codes[letter] = [icon, words, css];
   compile-path verdict letters: per backend in D.compile.backends order (those with compile coverage), one per
   mode]. The verdict filter matches a model whose eager or compiled verdict it names. */
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("models-data").textContent);
  var $ = function (id) { return document.getElementById(id); };
  var FACETS = ["family", "task", "modality"], KEYS = ["q", "family", "task", "modality", "verdict", "backend", "mode"];
  var IDS = {q: "mq", family: "family", task: "task", modality: "modality", verdict: "verdict", backend: "mbackend", mode: "mmode"};
  var table = $("models-table"), thead = table.querySelector("thead");
  var count = $("model-count"), cols = [];
  var NM = D.modes.length, CB = (D.compile && D.compile.backends) || [];

  function esc(s) { return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/"/g, "&quot;"); }
  function opt(sel, value, text) {
    var o = document.createElement("option"); o.value = value; o.textContent = text; sel.appendChild(o);
  }
  FACETS.forEach(function (f, k) {
    var n = D.facets[f].map(function () { return 0; });
    D.models.forEach(function (m) { n[m[2 + k]]++; });
    D.facets[f].forEach(function (v, i) { opt($(f), String(i), v + " (" + n[i] + ")"); });
  });
  D.verdicts.forEach(function (v) { opt($("verdict"), v[1], v[0]); });
  D.backends.forEach(function (b, i) { opt($("mbackend"), String(i), b.name + " (torch " + b.torch + ")"); });

  function state() {
    var s = {};
    KEYS.forEach(function (k) { s[k] = $(IDS[k]).value; });
    s.q = s.q.trim().toLowerCase();
    return s;
  }
  /* The letters of one model that the backend and mode filters look at: [backend index, mode index, letter]. */
  function looked(m, s) {
    var out = [];
    for (var b = 0; b < D.backends.length; b++) {
      if (s.backend !== "" && +s.backend !== b) continue;
      for (var k = 0; k < NM; k++) {
        if (s.mode && D.modes[k] !== s.mode) continue;
        out.push(m[5].charAt(b * NM + k));
      }
    }
    CB.forEach(function (c, ci) {
      if (s.backend !== "" && D.backends[+s.backend].name !== c.name) return;
      for (var k = 0; k < NM; k++) if (!s.mode || D.modes[k] === s.mode) out.push((m[6] || "").charAt(ci * NM + k));
    });
    return out;
  }
  function matches(m, s) {
    if (s.q && m[0].toLowerCase().indexOf(s.q) < 0) return false;
    for (var k = 0; k < FACETS.length; k++) if (s[FACETS[k]] !== "" && m[2 + k] !== +s[FACETS[k]]) return false;
    if (s.verdict) {
      var cells = looked(m, s);
      for (var j = 0; j < cells.length; j++) if (s.verdict.indexOf(cells[j]) >= 0) return true;
      return false;
    }
    return true;
  }
  function header(s) {
    cols = [];
    var h = "<tr><th scope=\"col\">model</th><th scope=\"col\">family</th><th scope=\"col\">task</th><th scope=\"col\">modality</th>";
    D.backends.forEach(function (b, bi) {
      if (s.backend !== "" && +s.backend !== bi) return;
      D.modes.forEach(function (mode, k) {
        if (s.mode && mode !== s.mode) return;
        cols.push([bi, k]);
        h += "<th scope=\"col\">" + esc(b.name) + " " + esc(mode) + "<span class=\"ver\">torch " + esc(b.torch) + "</span></th>";
      });
    });
    CB.forEach(function (c, ci) {
      if (s.backend !== "" && D.backends[+s.backend].name !== c.name) return;
      D.modes.forEach(function (mode, k) {
        if (s.mode && mode !== s.mode) return;
        cols.push([ci, k, c]);
        h += "<th scope=\"col\">" + esc(c.name) + " " + esc(mode) + ", compiled<span class=\"ver\">torch.compile, " + esc(c.compiler) + "</span></th>";
      });
    });
    thead.innerHTML = h + "</tr>";
  }
  function row(m) {
    var h = "<tr><th scope=\"row\"><a href=\"" + esc(m[1]) + "\">" + esc(m[0]) + "</a></th>";
    FACETS.forEach(function (f, k) { h += "<td>" + esc(D.facets[f][m[2 + k]]) + "</td>"; });
    cols.forEach(function (c) {
      var compiled = c.length > 2, letter = compiled ? (m[6] || "").charAt(c[0] * NM + c[1]) : m[5].charAt(c[0] * NM + c[1]);
      var v = D.codes[letter], name = compiled ? c[2].name : D.backends[c[0]].name;
      if (!v) { h += "<td class=\"st none\">&middot; " + (compiled ? "no compiled op set" : "no data") + "</td>"; return; }
      h += "<td class=\"st " + v[2] + "\"><a href=\"" + esc(m[1] + "#" + (compiled ? "compile-" : "") + D.modes[c[1]] + "-" + name) + "\">" +
        "<span aria-hidden=\"true\">" + v[0] + "</span> " + esc(v[1]) + "</a></td>";
    });
    return h + "</tr>";
  }
  var paint = window.opcovSearch.pager(table, $("more-models"), 100, row);
  function render() {
    var s = state(), shown = D.models.filter(function (m) { return matches(m, s); });
    header(s);
    paint(shown);
    var said = [];
    FACETS.forEach(function (f) { if (s[f] !== "") said.push(f + " " + D.facets[f][+s[f]]); });
    if (s.verdict) {
      var label = $("verdict").options[$("verdict").selectedIndex].textContent;
      said.push(label + " on " + (s.backend !== "" ? D.backends[+s.backend].name : "some backend") + (s.mode ? " in " + s.mode : ""));
    }
    count.textContent = shown.length + " of " + D.models.length + " models shown" + (said.length ? " (" + said.join("; ") + ")" : "");
    var hash = [];
    KEYS.forEach(function (k) { var v = $(IDS[k]).value.trim(); if (v) hash.push(k + "=" + encodeURIComponent(v)); });
    var want = "#" + hash.join("&");
    if (location.hash !== want && !(want === "#" && !location.hash)) {
      try { history.replaceState(null, "", want); } catch (e) { /* some file:// settings forbid it */ }
    }
    document.documentElement.setAttribute("data-models-ready", "1");
  }
  function load() {
    var params = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      var i = kv.indexOf("=");
      if (i > 0) params[kv.slice(0, i)] = decodeURIComponent(kv.slice(i + 1));
    });
    KEYS.forEach(function (k) {
      var el = $(IDS[k]);
      el.value = params[k] || "";
      if (el.value !== (params[k] || "")) el.value = "";  /* a value this data does not offer */
    });
  }
  var timer = null;
  $("model-filters").addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(render, 60); });
  $("model-filters").addEventListener("change", render);
  $("model-filters").addEventListener("submit", function (e) { e.preventDefault(); render(); });
  window.addEventListener("hashchange", function () { load(); render(); });
  load();
  render();
})();
