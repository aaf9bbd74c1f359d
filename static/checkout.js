// The checkout page's countdown: each live hold's time left, counted down every second without a
// reload. The page says how many seconds were left by the DATABASE's clock when it was made
// (data-seconds-left, the clock that decides expiry); this counts down from there on the
// browser's monotonic clock, so a computer whose clock is wrong still shows the right time left.
// Without script the page works the same and says until when each hold lasts. At zero the row
// says the hold has expired, its buttons are switched off (the server refuses them anyway, with
// its own sentence) and its "Hold again" is shown: the same quantity held anew, if any is left.
(function () {
  "use strict";
  var timers = Array.prototype.slice.call(document.querySelectorAll(".countdown[data-seconds-left]"));
  if (!timers.length) return;
  var loaded = performance.now();
  function written(seconds) {
    var minutes = Math.floor(seconds / 60), rest = seconds % 60;
    return minutes + ":" + (rest < 10 ? "0" : "") + rest;
  }
  function expire(element) {
    element.textContent = element.dataset.expiredText;
    var row = element.closest("tr");
    if (!row) return;
    row.classList.add("expired");
    row.querySelectorAll(".place-order, .release").forEach(function (button) { button.disabled = true; });
    var again = row.querySelector("form.hold-again");
    if (again) again.hidden = false;
  }
  var timer;
  function tick() {
    var gone = Math.floor((performance.now() - loaded) / 1000);
    timers = timers.filter(function (element) {
      var left = Number(element.dataset.secondsLeft) - gone;
      if (left > 0) {
        element.textContent = written(left);
        return true;
      }
      expire(element);
      return false;
    });
    if (!timers.length) clearInterval(timer);
  }
  // Four times a second, so the shown second never lags the true one by much.
  timer = setInterval(tick, 250);
  tick();
})();
