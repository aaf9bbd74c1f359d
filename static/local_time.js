// The one writer of times on the pages. The server writes each time in UTC (its sessions run in
// UTC) inside a <time datetime="…" data-local="datetime|time">; this rewrites it in the viewer's
// own time zone, the same way on every page and in both languages: 2026-11-25 17:18:53 JST
// (GMT+9 in English), or 17:18:53 JST for a time of day, the zone always named, UTC on hover.
// Without script, the UTC time stays, saying so. Other scripts that put a time on a page set
// the element's `datetime` and call `haita.showLocal(element)` (the edit page's lock expiry,
// renewed by each heartbeat), so no page writes a time any other way.
(function () {
  "use strict";
  // The page's language names the zone ("JST" in Japanese); the digits are laid out here rather
  // than by the locale, so that English is not written 11/25/2026, 05:18:53 PM.
  var locale = document.documentElement.lang || undefined;
  var format = new Intl.DateTimeFormat(locale, {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
    timeZoneName: "short"
  });
  function written(at, kind) {
    var part = {};
    format.formatToParts(at).forEach(function (p) { part[p.type] = p.value; });
    var clock = part.hour + ":" + part.minute + ":" + part.second + " " + part.timeZoneName;
    return kind === "time" ? clock : part.year + "-" + part.month + "-" + part.day + " " + clock;
  }
  function showLocal(element) {
    var at = new Date(element.getAttribute("datetime"));
    var kind = element.dataset.local;
    if ((kind === "time" || kind === "datetime") && !isNaN(at.getTime())) {
      element.title = at.toISOString().slice(0, 19).replace("T", " ") + " UTC";
      element.textContent = written(at, kind);
    }
  }
  window.haita = Object.assign(window.haita || {}, { showLocal: showLocal });
  document.querySelectorAll("time[data-local]").forEach(showLocal);
})();
