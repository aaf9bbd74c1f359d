// The edit page's half of the edit lock: taking it as the page opens, a heartbeat while the page
// is open, and a release when the user leaves without saving. Both are best effort; the lock's expiry is the safety net.
(function () {
  "use strict";
  // The page before the editor: take the lock (a POST with the form's CSRF token) right away.
  var start = document.getElementById("start-editing");
  if (start) {
    start.submit();
    return;
  }
  var form = document.getElementById("edit-form");
  if (!form) return;
  var url = form.dataset.heartbeatUrl;
  var every = Number(form.dataset.heartbeatMs) || 60000;
  // The lock's last heartbeat as this page knows it: the release on leave names it, so a late
  // release cannot end a lock that a reload of this page has renewed meanwhile.
  var lastBeat = form.dataset.heartbeatAt;
  var lost = document.getElementById("lock-lost");
  var lostBox = document.getElementById("lock-lost-box");
  var status = document.getElementById("lock-status");
  var draftUrl = form.dataset.draftUrl;
  var leaving = false; // set when a form submits (Save and Cancel end the lock themselves) or the draft is restored
  // The API takes a request that changes something only as JSON, even without a body: another
  // site's page cannot send that header without the server's consent (CORS), so no CSRF token.
  var JSON_HEADERS = { "Accept": "application/json", "Content-Type": "application/json" };

  // The form as typed. The draft is sent when it differs from what the page opened with and from
  // what was last kept, so an untouched editor keeps nothing.
  function fields() {
    return {
      name: form.elements.name.value,
      description: form.elements.description.value,
      capacity: form.elements.capacity.value
    };
  }
  var opened = JSON.stringify(fields());
  var kept = opened;
  function keepDraft() {
    var now = JSON.stringify(fields());
    if (now === opened || now === kept) return Promise.resolve(true);
    return fetch(draftUrl, { method: "PUT", credentials: "same-origin", headers: JSON_HEADERS, body: now })
      .then(function (response) { if (response.ok) kept = now; return response.ok; })
      .catch(function () { return false; });
  }

  // How the lock ended, as the server says it to this person in the page's language (who, when,
  // why, and the actions that can work now), or null when that cannot be asked.
  function howItEnded() {
    return fetch(lostBox.dataset.endedUrl, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .catch(function () { return null; });
  }

  function showLost() {
    leaving = true; // the lock is not this page's any more: nothing to release on leave
    // Save and Cancel cannot work without the lock: only what can is offered.
    document.getElementById("save-row").hidden = true;
    document.getElementById("cancel-form").hidden = true;
    // Keep what was typed first: the person may close the tab on reading this.
    Promise.all([keepDraft(), howItEnded()]).then(function (results) {
      var keptOk = results[0], told = results[1];
      if (told) {
        lostBox.innerHTML = told;
        lost = document.getElementById("lock-lost");
        if (window.haita) lostBox.querySelectorAll("time[data-local]").forEach(window.haita.showLocal);
      } else {
        lost.textContent = form.dataset.lostText;
      }
      // The sentences come from the page, in its language.
      lost.append(" " + (keptOk ? form.dataset.keptText : form.dataset.unkeptText));
      lostBox.hidden = false;
      status.hidden = true;
    });
  }

  var timer = setInterval(function () {
    // The epoch this page's lock was acquired in: once the lock is a later acquisition (ended
    // and retaken, in another tab say), this page's input would overwrite what it never showed.
    var beat = url + "?epoch=" + encodeURIComponent(form.dataset.lockEpoch);
    fetch(beat, { method: "PUT", credentials: "same-origin", headers: JSON_HEADERS })
      .then(function (response) {
        if (response.ok) {
          keepDraft();
          return response.json().then(function (lock) {
            lastBeat = lock.heartbeat_at;
            // The banner's expiry stays true: the heartbeat has just moved it.
            var expiry = document.querySelector("#lock-status time");
            if (expiry && window.haita) {
              expiry.setAttribute("datetime", lock.expires_at);
              window.haita.showLocal(expiry);
            }
          });
        }
        // 423: the lock is someone else's, or nobody's, or a later acquisition's; 401: logged
        // out (which ends the session's locks). Anything else may pass: beat again.
        if (response.status === 423 || response.status === 401) {
          clearInterval(timer);
          showLost();
        }
      })
      .catch(function () { /* network blip: the next beat may succeed before the lock expires */ });
  }, every);

  document.querySelectorAll("form").forEach(function (f) {
    f.addEventListener("submit", function () { leaving = true; });
  });
  // Restoring the draft reopens this editor under the same lock: not a leave.
  var restore = document.getElementById("restore-draft");
  if (restore) restore.addEventListener("click", function () { leaving = true; });

  window.addEventListener("pagehide", function () {
    if (leaving) return;
    clearInterval(timer);
    // keepalive lets the request outlive the page.
    var release = url + "?if_heartbeat=" + encodeURIComponent(lastBeat);
    fetch(release, { method: "DELETE", credentials: "same-origin", keepalive: true, headers: JSON_HEADERS })
      .catch(function () {});
  });

  // Coming back through the back/forward cache: the lock was released on leave, so reload to
  // take it again (or to see who holds it now).
  window.addEventListener("pageshow", function (event) {
    if (event.persisted) window.location.reload();
  });
})();
