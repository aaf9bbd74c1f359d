// The locks page's batch runs, kept current in place: the row of each run that is going is
// fetched again every second, as the server renders it in the page's language
// (`/admin/batch-runs/{id}`), and swapped in, until the run has ended. Nothing else on the page
// is touched, so what the admin is typing (a force-release reason) stays. Without script, a link
// under the table shows the page again.
(function () {
  "use strict";
  var EVERY = 1000;
  function follow(id) {
    var busy = false;
    var timer = setInterval(function () {
      if (busy) return; // one request at a time, however slow the answer
      busy = true;
      fetch("/admin/batch-runs/" + encodeURIComponent(id), {
        credentials: "same-origin",
        headers: { "Accept": "text/html" }
      })
        .then(function (response) { return response.ok ? response.text() : null; })
        .then(function (html) {
          var row = document.querySelector('tr[data-run="' + id + '"]');
          if (html === null || !row) return;
          var template = document.createElement("template");
          template.innerHTML = html.trim();
          var fresh = template.content.querySelector("tr");
          if (!fresh) return;
          row.replaceWith(fresh);
          if (window.haita) fresh.querySelectorAll("time[data-local]").forEach(window.haita.showLocal);
          if (fresh.dataset.status !== "running") clearInterval(timer);
        })
        .catch(function () { /* a blip: the next second asks again */ })
        .then(function () { busy = false; });
    }, EVERY);
  }
  document.querySelectorAll('tr[data-run][data-status="running"]').forEach(function (row) {
    follow(row.dataset.run);
  });
})();
