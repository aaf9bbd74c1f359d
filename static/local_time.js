// Times are written by the server in UTC (its sessions run in UTC): this shows each one in the
// viewer's own time zone, with the zone named, and leaves UTC in the tooltip. Without script,
// the UTC time stays, saying so. `haita.showLocal(element)` redoes one after a script changed
// its `datetime` (the edit page's lock expiry, renewed by each heartbeat).
(function () {
  "use strict";
  var parts = { hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" };
  var withDate = Object.assign({ year: "numeric", month: "2-digit", day: "2-digit" }, parts);
  // Written the page's way (its language), in the viewer's own time zone.
  var locale = document.documentElement.lang || undefined;
  var formats = {
    time: new Intl.DateTimeFormat(locale, parts),
    datetime: new Intl.DateTimeFormat(locale, withDate),
  };
  function showLocal(element) {
    var at = new Date(element.getAttribute("datetime"));
    var format = formats[element.dataset.local];
    if (format && !isNaN(at.getTime())) {
      element.title = at.toISOString().slice(0, 19).replace("T", " ") + " UTC";
      element.textContent = format.format(at);
    }
  }
  window.haita = Object.assign(window.haita || {}, { showLocal: showLocal });
  document.querySelectorAll("time[data-local]").forEach(showLocal);
})();
