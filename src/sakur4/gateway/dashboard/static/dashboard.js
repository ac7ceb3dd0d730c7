// Sakur4 dashboard: keeps a page live. The page is complete without this script; here it
// polls the page's JSON endpoint (main[data-api]) and, when the version there differs
// from the one the page was rendered at, fetches the page again and swaps in its <main>,
// keeping the rows a reader has opened. No other network, no libraries.
(function () {
  "use strict";
  var POLL_MS = 1000;
  var main = document.getElementById("live");
  var status = document.getElementById("live-status");
  if (!main || !main.dataset.api) { return; }

  function say(text) { if (status) { status.textContent = text; } }

  function openDetails() {
    var ids = [];
    main.querySelectorAll("details[open][id]").forEach(function (d) { ids.push(d.id); });
    return ids;
  }

  function refresh() {
    return fetch(window.location.href, { headers: { Accept: "text/html" } })
      .then(function (r) { if (!r.ok) { throw new Error("page " + r.status); } return r.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (!fresh) { throw new Error("no live part in the page"); }
        var keep = openDetails();
        main.innerHTML = fresh.innerHTML;
        main.dataset.version = fresh.dataset.version;
        keep.forEach(function (id) {
          var d = document.getElementById(id);
          if (d) { d.open = true; }
        });
        say("updated " + new Date().toLocaleTimeString());
      });
  }

  function poll() {
    fetch(main.dataset.api, { headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) { throw new Error("api " + r.status); } return r.json(); })
      .then(function (data) {
        if (data.version !== main.dataset.version) { return refresh(); }
        say("live: checked " + new Date().toLocaleTimeString());
      })
      .catch(function (e) { say("not updating: " + e.message); })
      .then(function () { window.setTimeout(poll, POLL_MS); });
  }

  say("live");
  window.setTimeout(poll, POLL_MS);
})();
