// Live progress: the run's ledger events over Server-Sent Events, appended as text (never as
// markup). A decision landing, or the run ending, reloads the page so its forms are current.
// The inbox: one checkbox selects every approval on the page.
(function () {
  var all = document.getElementById("pick-all");
  if (!all) return;
  all.addEventListener("change", function () {
    document.querySelectorAll("input[name=pick]").forEach(function (box) { box.checked = all.checked; });
  });
})();
(function () {
  // A refused answer comes back as the response to its POST: the address becomes the run page's
  // again, so reloading it asks for the page instead of sending the answer twice.
  if (/\/decide$/.test(window.location.pathname)) {
    history.replaceState(null, "", window.location.pathname.replace(/\/decide$/, ""));
  }
  var timeline = document.getElementById("timeline");
  if (!timeline || timeline.dataset.finished === "true" || !window.EventSource) return;
  var run = encodeURIComponent(timeline.dataset.run);
  // A form on its way must land (its answer says whether the decision was taken): no reload then.
  var submitting = false;
  document.addEventListener("submit", function () { submitting = true; });
  // What a person typed into a refused form stays until they send it again: no reload under it.
  var keeping = document.querySelector("[aria-invalid=true]") !== null;
  function reload() { source.close(); if (!submitting && !keeping) window.location.reload(); }
  var source = new EventSource("/api/runs/" + run + "/stream?after=" + timeline.dataset.after);
  var reloadOn = ["plan_proposed", "plan_approved", "step_awaiting_approval", "step_awaiting_answer",
    "call_awaiting_approval", "repair_requested", "budget_exhausted", "run_succeeded", "run_failed",
    "run_rejected", "run_cancelled"];
  source.addEventListener("ledger", function (message) {
    var event = JSON.parse(message.data);
    var item = document.createElement("li");
    var text = event.at.slice(11, 19) + " " + event.kind + (event.step_id ? " " + event.step_id : "") +
      (event.actor ? " by " + event.actor : "") + (event.message ? " — " + event.message : "");
    item.textContent = text;
    timeline.appendChild(item);
    if (reloadOn.indexOf(event.kind) >= 0) reload();
  });
  // The run ended: the page shows its outcome (a reconnect that starts past the last decision lands here).
  source.addEventListener("end", reload);
})();
