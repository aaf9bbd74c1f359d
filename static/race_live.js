// Follows the cluster's race while the page is open (server-sent events from
// /demo/races/live): each strategy's attempts, bookings and double bookings so far, the run
// button held while any race runs (whoever started it), and the result swapped in when it is
// stored, without a reload. Without script the page still works: the button posts, and the
// page shows the race as it stood when it was loaded.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource) return;
  var rows = document.getElementById("live-rows");
  var about = document.getElementById("live-about");
  var status = document.getElementById("live-status");
  var buttons = document.querySelectorAll("button.run-race");
  // The page's words, in its language: `%{name}` filled in here.
  var words = live.dataset;
  function say(text, values) {
    return text.replace(/%\{(\w+)\}/g, function (all, name) { return name in values ? values[name] : all; });
  }
  var running = !live.hidden;
  var said = {};
  // Each figure's cell is named by its column, as the server names them: on a phone the rows
  // show as cards, and a tile shows its name (style.css, table.cards).
  var heads = Array.prototype.map.call(live.querySelectorAll("thead th"), function (th) {
    return th.textContent;
  });

  function cell(row, text, tag) {
    var td = document.createElement("td");
    if (row.cells.length > 0 && heads[row.cells.length]) td.dataset.label = heads[row.cells.length];
    var inner = document.createElement(tag || "span");
    inner.textContent = text;
    td.appendChild(inner);
    row.appendChild(td);
    return td;
  }

  function show(race) {
    rows.textContent = "";
    race.strategies.forEach(function (s) {
      var row = document.createElement("tr");
      if (s.double_bookings > 0) row.className = "bad";
      cell(row, s.strategy, "code");
      cell(row, words[s.stage] || s.stage);
      var progress = document.createElement("progress");
      progress.max = race.attempts;
      progress.value = s.attempts;
      progress.setAttribute("aria-label", s.strategy + ": " + words.soFar);
      cell(row, " " + s.attempts + " / " + race.attempts).prepend(progress);
      cell(row, String(s.confirmed));
      cell(row, String(s.double_bookings), "strong");
      rows.appendChild(row);
      // Said once per strategy, not on every count: the status line is read out by screen readers.
      if (s.stage === "done" && !said[s.strategy]) {
        said[s.strategy] = true;
        status.textContent = say(words.through,
          { strategy: s.strategy, confirmed: s.confirmed, double: s.double_bookings });
      }
    });
    about.textContent = say(words.about,
      { clients: race.clients, attempts: race.attempts, pause: race.pause_ms,
        who: race.started_by === words.visitorName ? words.visitor : race.started_by });
  }

  function hold(held) {
    buttons.forEach(function (button) { button.disabled = held; });
  }

  // The stored report's part of the page, fetched and put in place of the one shown.
  function showReport(id) {
    fetch("/demo?race=" + encodeURIComponent(id), { credentials: "same-origin" })
      .then(function (response) { return response.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("race-results");
        var shown = document.getElementById("race-results");
        if (!fresh || !shown) return;
        shown.replaceWith(fresh);
        fresh.querySelectorAll("time[data-local]").forEach(function (t) {
          if (window.haita && window.haita.showLocal) window.haita.showLocal(t);
        });
        live.hidden = true;
        status.textContent = say(words.over, { id: id });
        history.replaceState(null, "", "/demo?race=" + id + "#results");
      })
      .catch(function () {
        status.textContent = say(words.reload, { id: id });
      });
  }

  new EventSource("/demo/races/live").onmessage = function (event) {
    var state = JSON.parse(event.data);
    if (state.race) {
      if (!running) said = {};
      // No race had ended when the page was loaded: where the results will be, say one runs.
      var none = document.querySelector("p#results");
      if (none) none.textContent = words.pending;
      running = true;
      live.hidden = false;
      hold(true);
      show(state.race);
      return;
    }
    hold(false);
    if (!running) return;
    running = false;
    var finished = state.finished;
    if (finished && finished.outcome === "report") {
      showReport(finished.race_id);
    } else if (finished) {
      status.textContent = finished.message;
    }
  };
})();
