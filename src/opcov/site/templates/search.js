/* opcov site search: the box in every page's header, the search page, and the ranking the matrix uses.
   The index (assets/search-index.js, written by 'opcov site') is loaded on first use by a script tag, so it
   works from file:// as from a server. It holds every op with a support letter per backend and direction
   (D.codes), the Python-name index (name -> ops it dispatches) and the models. Ranking mirrors
   'opcov ops' (opcov.support.rank): exact names first, then ops a Python name reaches, then prefix, then
   substring. */
(function () {
  "use strict";
  var me = document.currentScript, root = (me && me.getAttribute("data-root")) || "";
  var D = null, waiting = [], loading = false, pyOf = null;

  function load(cb) {
    if (D) { cb(D); return; }
    waiting.push(cb);
    if (loading) return;
    loading = true;
    var s = document.createElement("script");
    s.src = root + "assets/search-index.js";
    s.onload = function () {
      D = window.OPCOV_INDEX;
      pyOf = {};
      D.py.forEach(function (p) { p[1].forEach(function (i) { (pyOf[i] = pyOf[i] || []).push(p[0]); }); });
      waiting.splice(0).forEach(function (f) { f(D); });
    };
    document.head.appendChild(s);
  }

  function expand(q) {
    for (var i = 0; i < D.prefixes.length; i++) {
      if (q.indexOf(D.prefixes[i][0]) === 0) return D.prefixes[i][1] + q.slice(D.prefixes[i][0].length);
    }
    return "torch." + q;
  }
  /* Python name -> op indices, for what q names (opcov.scan.pynames.Index.resolve). */
  function python(q) {
    var out = {}, byName = {};
    D.py.forEach(function (p) { byName[p[0]] = p[1]; });
    if (!/^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$/.test(q)) return out;
    if (q.indexOf(".") >= 0) {
      var full = expand(q);
      if (byName[full]) out[full] = byName[full];
      return out;
    }
    for (var fold = 0; fold < 2; fold++) {
      var key = fold ? q.toLowerCase() : q, found = false;
      D.py.forEach(function (p) {
        var cut = p[0].lastIndexOf("."), home = p[0].slice(0, cut), last = p[0].slice(cut + 1);
        if (D.homes.indexOf(home) >= 0 && (fold ? last.toLowerCase() : last) === key) { out[p[0]] = p[1]; found = true; }
      });
      if (found) break;
    }
    return out;
  }

  var HOW = ["exact", "Python name", "prefix", "substring"];
  /* Ops matching q, best first: [{i, how, via: [Python names]}]. */
  function rank(q) {
    q = q.trim();
    if (!q) return [];
    var lq = q.toLowerCase(), py = python(q), via = {}, out = [];
    Object.keys(py).sort().forEach(function (name) { py[name].forEach(function (i) { (via[i] = via[i] || []).push(name); }); });
    for (var i = 0; i < D.ops.length; i++) {
      var op = D.ops[i][0], l = op.toLowerCase(), local = l.slice(l.indexOf("::") + 2);
      var tier = -1;
      if (l === lq || local === lq || l.split(".")[0] === lq || local.split(".")[0] === lq) tier = 0;
      else if (via[i]) tier = 1;
      else if (local.indexOf(lq) === 0 || l.indexOf(lq) === 0) tier = 2;
      else if (l.indexOf(lq) >= 0) tier = 3;
      if (tier >= 0) out.push({i: i, tier: tier, how: HOW[tier], via: via[i] || []});
    }
    out.sort(function (a, b) {
      var x = D.ops[a.i][0], y = D.ops[b.i][0];
      return a.tier - b.tier || (b.via.length > 0) - (a.via.length > 0) ||
        (y.indexOf("aten::") === 0) - (x.indexOf("aten::") === 0) || (x < y ? -1 : x > y ? 1 : 0);
    });
    return out;
  }
  /* Models whose name contains q, best first as ops are: the exact name, then names starting with q, then
     the rest, each by name ('llama' before 'llama4' before 'diffllama'). */
  function models(q) {
    var lq = q.trim().toLowerCase();
    if (!lq) return [];
    function tier(m) { var n = m[0].toLowerCase(); return n === lq ? 0 : n.indexOf(lq) === 0 ? 2 : 3; }
    return D.models.filter(function (m) { return m[0].toLowerCase().indexOf(lq) >= 0; }).sort(function (a, b) {
      return tier(a) - tier(b) || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);
    });
  }
  /* Backend pages whose backend name contains q (those without data too: 'neuron' finds its 'no data yet'
     page), the exact name first. */
  function backends(q) {
    var lq = q.trim().toLowerCase();
    if (!lq) return [];
    return (D.pages || []).filter(function (p) { return p[0].toLowerCase().indexOf(lq) >= 0; }).sort(function (a, b) {
      return (b[0].toLowerCase() === lq) - (a[0].toLowerCase() === lq) || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);
    });
  }
  /* Op i's section on its page (as matrix.js's href; D.hrefs lists the ops placed otherwise). */
  function href(i) {
    var op = D.ops[i][0], k = op.indexOf("::"), rest = op.slice(k + 2), base = rest.split(".")[0];
    if (base.length > 1 && /_$/.test(base) && !/__$/.test(base)) base = base.slice(0, -1);
    return root + (D.hrefs[op] || "ops/" + op.slice(0, k) + "/" + base + ".html#" + rest);
  }
  function esc(s) { return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/"/g, "&quot;"); }
  /* One backend's mark for op i: icon and backend name, the class of its forward's support letter. */
  function marks(i) {
    var sup = D.ops[i][1], h = "";
    for (var b = 0; b < D.backends.length; b++) {
      var f = D.codes[sup.charAt(2 * b)], w = D.codes[sup.charAt(2 * b + 1)];
      h += "<span class=\"st " + f[2] + "\" title=\"" + esc(D.backends[b] + ": forward " + f[3] + "; backward " + w[3]) +
        "\">" + f[0] + " " + esc(D.backends[b]) + "</span> ";
    }
    return h;
  }

  /* ---- the header box: a list of the best results under it; Enter opens the chosen one */
  /* The box's combobox parts are made here, not written into every page (~1,900 op pages): its help, its
     list of results and the ARIA that ties them to the input. */
  function parts(form, input) {
    var attrs = {spellcheck: "false", "aria-describedby": "site-q-help", "aria-controls": "site-q-results",
                 "aria-expanded": "false", "aria-autocomplete": "list", role: "combobox"};
    Object.keys(attrs).forEach(function (k) { input.setAttribute(k, attrs[k]); });
    form.insertAdjacentHTML("beforeend",
      "<span id=\"site-q-help\" class=\"sr\">Exact matches first; arrow keys choose a result, Enter opens it.</span>" +
      "<div class=\"results\" hidden><div id=\"site-q-results\" role=\"listbox\" aria-label=\"Search results\"></div>" +
      "<p class=\"all\"></p></div>");
  }
  function box(form) {
    var input = form.querySelector("input[type=search]");
    if (!form.querySelector(".results")) parts(form, input);
    var panel = form.querySelector(".results");
    var list = panel.querySelector("[role=listbox]"), all = panel.querySelector(".all"), active = 0, items = [];
    function hide() { panel.hidden = true; input.setAttribute("aria-expanded", "false"); }
    function show() {
      var q = input.value;
      if (!q.trim()) { hide(); return; }
      load(function () {
        if (input.value !== q) return;
        var ops = rank(q), ms = models(q), bs = backends(q);
        var opItems = ops.slice(0, 8).map(function (m) {
          return {href: href(m.i), html: "<code>" + esc(D.ops[m.i][0]) + "</code>" +
            (m.via.length ? " <span class=\"muted\">(" + esc(m.via.slice(0, 2).join(", ")) + (m.via.length > 2 ? ", ..." : "") + ")</span>" : "") +
            "<br>" + marks(m.i)};
        }), modelItems = ms.slice(0, 3).map(function (m) {
          return {href: root + m[1], html: "model <strong>" + esc(m[0]) + "</strong>"};
        });
        var backendItems = bs.slice(0, 2).map(function (p) {
          return {href: root + p[1], html: "backend <strong>" + esc(p[0]) + "</strong> <span class=\"muted\">(" + esc(p[2]) + ")</span>"};
        });
        /* a model or backend named exactly q comes before ops that only contain q (Enter on 'bert' opens
           bert, on 'neuron' neuron's page) */
        var exactModel = ms.length && ms[0][0].toLowerCase() === q.trim().toLowerCase();
        var exactBackend = bs.length && bs[0][0].toLowerCase() === q.trim().toLowerCase();
        var exactOp = ops.length && ops[0].tier <= 1;
        items = exactModel && !exactOp ? modelItems.concat(opItems) : opItems.concat(modelItems);
        items = exactBackend && !exactOp ? backendItems.concat(items) : items.concat(backendItems);
        active = 0;
        var h = items.map(function (it, k) {
          return "<a role=\"option\" id=\"site-q-" + k + "\" href=\"" + esc(it.href) + "\"" + (k === active ? " aria-selected=\"true\"" : "") +
            ">" + it.html + "</a>";
        }).join("");
        var total = ops.length + ms.length + bs.length;
        list.innerHTML = h;
        list.setAttribute("data-q", q);  /* which query the list answers */
        all.innerHTML = "<a href=\"" + esc(root + "search.html?q=" + encodeURIComponent(q)) + "\">" +
          (total ? "All " + total + " results" : "Nothing matches " + esc(q) + "; search page") + "</a>";
        panel.hidden = false;
        input.setAttribute("aria-expanded", "true");
        select(0);
      });
    }
    function select(k) {
      var opts = list.querySelectorAll("[role=option]");
      if (!opts.length) { input.removeAttribute("aria-activedescendant"); return; }
      active = (k + opts.length) % opts.length;
      for (var j = 0; j < opts.length; j++) opts[j].setAttribute("aria-selected", j === active ? "true" : "false");
      input.setAttribute("aria-activedescendant", opts[active].id);
    }
    var timer = null;
    input.addEventListener("focus", function () { load(function () {}); });
    input.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(show, 40); });
    input.addEventListener("keydown", function (e) {
      if (e.key === "ArrowDown" || e.key === "ArrowUp") { e.preventDefault(); select(active + (e.key === "ArrowDown" ? 1 : -1)); }
      else if (e.key === "Escape") hide();
    });
    form.addEventListener("submit", function (e) {
      var q = input.value;
      if (!q.trim()) { e.preventDefault(); return; }
      e.preventDefault();
      load(function () {  /* the best result when there is one, else the search page */
        var ops = rank(q), opts = panel.hidden ? [] : list.querySelectorAll("[role=option]");
        if (opts.length && input.value === q) { location.href = opts[active].getAttribute("href"); return; }
        var ms = models(q), bs = backends(q), exact = !(ops.length && ops[0].tier <= 1);
        if (exact && bs.length && bs[0][0].toLowerCase() === q.trim().toLowerCase()) { location.href = root + bs[0][1]; return; }
        if (exact && ms.length && ms[0][0].toLowerCase() === q.trim().toLowerCase()) {
          location.href = root + ms[0][1]; return;
        }
        if (ops.length) { location.href = href(ops[0].i); return; }
        location.href = root + "search.html?q=" + encodeURIComponent(q);
      });
    });
    document.addEventListener("click", function (e) { if (!form.contains(e.target)) hide(); });
  }

  /* ---- the search page: every result, with each backend's answer */
  function page(el) {
    var q = (new URLSearchParams(location.search)).get("q") || "";
    var input = document.getElementById("site-q");
    if (input && q) input.value = q;
    load(function () {
      var ops = rank(q), ms = models(q), bs = backends(q), py = python(q.trim());
      var h = "";
      if (bs.length) {
        h += "<h2>Backends</h2><ul class=\"found-backends\">" + bs.map(function (p) {
          return "<li><a href=\"" + esc(root + p[1]) + "\">" + esc(p[0]) + "</a> <span class=\"muted\">(" + esc(p[2]) + ")</span></li>";
        }).join("") + "</ul>";
      }
      Object.keys(py).sort().forEach(function (name) {
        h += "<p><code>" + esc(name) + "</code> dispatches " + (py[name].length ? py[name].map(function (i) {
          return "<a href=\"" + esc(href(i)) + "\">" + esc(D.ops[i][0]) + "</a>";
        }).join(", ") : "no aten op") + "</p>";
      });
      if (ms.length) {
        h += "<h2>Models</h2><ul>" + ms.map(function (m) { return "<li><a href=\"" + esc(root + m[1]) + "\">" + esc(m[0]) + "</a></li>"; }).join("") + "</ul>";
      }
      if (ops.length || !(bs.length || ms.length)) h += "<h2>Ops</h2>";
      if (!ops.length) h += bs.length || ms.length ? "" : "<p>No op matches <code>" + esc(q) + "</code>.</p>";
      else {
        h += "<p>" + ops.length + " op" + (ops.length === 1 ? "" : "s") + " match" + (ops.length === 1 ? "es" : "") +
          (ops.length > 300 ? "; the first 300 are shown" : "") + ". Each backend's forward: icon and words; hover for the backward.</p>";
        h += "<div class=\"scroll\"><table><caption class=\"sr\">Ops matching the search</caption><thead><tr><th scope=\"col\">op</th><th scope=\"col\">match</th><th scope=\"col\">backends (forward)</th></tr></thead><tbody>";
        ops.slice(0, 300).forEach(function (m) {
          h += "<tr><th scope=\"row\"><a href=\"" + esc(href(m.i)) + "\">" + esc(D.ops[m.i][0]) + "</a></th><td>" + esc(m.how) +
            (m.via.length ? " (" + esc(m.via.slice(0, 3).join(", ")) + ")" : "") + "</td><td>" + marks(m.i) + "</td></tr>";
        });
        h += "</tbody></table></div>";
      }
      el.innerHTML = h;
      document.documentElement.setAttribute("data-search-ready", "1");
    });
  }

  /* Rows of a long table drawn a page at a time (the matrix, the model index), so that a filter or a sort
     re-draws a few hundred rows, never thousands: the returned paint(rows) draws the first ``size`` of
     them as html(row) makes them; the button draws the next ones, and so does scrolling near it inside
     ``box`` where one is given. */
  function pager(table, button, size, html, box) {
    var tbody = table.tBodies[0], left = [];
    function next() {
      var part = left.splice(0, size);
      tbody.insertAdjacentHTML("beforeend", part.map(html).join(""));
      button.hidden = !left.length;
      button.textContent = "Show " + Math.min(size, left.length) + " more (" + left.length + " not shown yet)";
      table.setAttribute("data-rows", String(tbody.rows.length));
    }
    button.addEventListener("click", next);
    if (box && window.IntersectionObserver) {
      new IntersectionObserver(function (es) { if (es[0].isIntersecting && left.length) next(); },
        {root: box, rootMargin: "400px"}).observe(button);
    }
    return function paint(rows) { tbody.innerHTML = ""; left = rows.slice(); next(); };
  }

  window.opcovSearch = {load: load, rank: rank, python: python, pager: pager};
  function start() {
    var f = document.querySelector("header form.search");
    if (f) box(f);
    var el = document.getElementById("search-page");
    if (el) page(el);
    scrollers();
    window.addEventListener("resize", scrollers);
  }
  /* A table box that scrolls sideways (a wide table on a narrow screen) takes keyboard focus, so that it
     can be scrolled without a mouse, and is named by its table's caption. */
  function scrollers() {
    Array.prototype.forEach.call(document.querySelectorAll("div.scroll"), function (el) {
      if (el.scrollWidth > el.clientWidth + 1) {
        var cap = el.querySelector("caption");
        el.setAttribute("tabindex", "0");
        el.setAttribute("role", "region");
        el.setAttribute("aria-label", (cap ? cap.textContent : "Table") + " (scrolls sideways)");
      } else if (!el.classList.contains("matrix-wrap")) {
        el.removeAttribute("tabindex");
        el.removeAttribute("role");
        el.removeAttribute("aria-label");
      }
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();
