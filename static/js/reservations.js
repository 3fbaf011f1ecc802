// Reservation form. The availability grid: clicking a day fills the form with that class
// and day (local midnight to the next midnight; today starts at the next quarter hour);
// it counts what the form's team can have, and reloads when the team changes.
// The live hint: what submitting would do (within quota, over quota, refused), asked of
// the server, which reads the times in the user's time zone and refuses DST-ambiguous ones.
(function () {
  "use strict";
  var section = document.getElementById("availability-section");
  var form = document.getElementById("reservation-form");
  if (!section || !form) { return; }
  var hint = document.getElementById("window-hint");
  var submit = form.querySelector("button[type=submit]");
  var timer = null;
  var asked = 0;  // answers to older questions are dropped
  function field(name) { return form.querySelector("[name=" + name + "]"); }
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function local(d) {  // the one format of the pages and the inputs: 2026-12-01 16:00
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
      pad(d.getHours()) + ":" + pad(d.getMinutes());
  }
  function nextDay(day) {
    var parts = day.split("-").map(Number);
    var d = new Date(Date.UTC(parts[0], parts[1] - 1, parts[2] + 1));
    return d.toISOString().slice(0, 10);
  }
  section.addEventListener("click", function (event) {
    var cell = event.target.closest("td[data-day]");
    if (!cell) { return; }
    section.querySelectorAll("td.picked").forEach(function (c) { c.classList.remove("picked"); });
    cell.classList.add("picked");
    var day = cell.getAttribute("data-day");
    var start = day + " 00:00";
    var now = new Date();
    if (local(now).slice(0, 10) === day) {
      now.setMinutes(Math.ceil((now.getMinutes() + 1) / 15) * 15, 0, 0);
      start = local(now);
    }
    field("gpu_class").value = cell.getAttribute("data-class");
    field("start").value = start;
    field("end").value = nextDay(day) + " 00:00";
    field("count").focus();
    checkWindow();
  });

  function reloadGrid() {
    var params = new URLSearchParams({team: field("team").value});
    fetch(section.getAttribute("data-url") + "?" + params.toString(), {credentials: "same-origin"})
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) { if (html) { section.innerHTML = html; } })
      .catch(function () {});
  }

  function say(kind, lines) {
    hint.className = "helptext" + (kind ? " " + kind : "");
    hint.textContent = "";
    lines.forEach(function (text) {
      var line = document.createElement("span");
      line.className = "line";
      line.textContent = text;
      hint.appendChild(line);
    });
  }
  var LOOK = {in_quota: "", over_quota: "warn", over_quota_blocked: "errorlist",
              no_capacity: "errorlist", impossible: "errorlist"};
  function checkWindow() {
    if (!hint) { return; }
    var start = field("start").value, end = field("end").value, cls = field("gpu_class").value;
    if (!start || !end || !cls) { say("", []); return; }
    var params = new URLSearchParams({gpu_class: cls, start: start, end: end,
      team: field("team").value, count: field("count").value || "",
      placement: field("placement").value});
    if (hint.getAttribute("data-backfill")) { params.set("backfill", "1"); }
    var question = ++asked;
    fetch(hint.getAttribute("data-url") + "?" + params.toString(), {credentials: "same-origin"})
      .then(function (response) { return response.json(); })
      .then(function (data) {
        if (question !== asked) { return; }
        submit.textContent = submit.getAttribute("data-label");
        if (data.errors) { say("errorlist", Object.values(data.errors)); return; }
        if (data.error) { say("errorlist", [data.error]); return; }
        var lines = [data.free_gpus + " of " + data.total_gpus + " " + data.gpu_class +
          " GPUs are free for this whole window."];
        if (data.room_message) { lines.push(data.room_message); }
        if (data.verdict) {
          lines.push(data.verdict_message);
          if (data.verdict === "over_quota" || data.verdict === "over_quota_blocked") {
            submit.textContent = "Request approval";
          }
        }
        var wanted = parseInt(field("count").value || "0", 10);
        say(data.verdict ? LOOK[data.verdict] : (wanted > data.free_gpus ? "errorlist" : ""),
            lines);
        hint.setAttribute("data-verdict", data.verdict || "");
      })
      .catch(function () { say("", []); });
  }
  ["start", "end", "gpu_class", "count", "placement", "team"].forEach(function (name) {
    var input = field(name);
    if (!input) { return; }
    ["change", "input"].forEach(function (type) {
      input.addEventListener(type, function () {
        clearTimeout(timer);
        timer = setTimeout(checkWindow, 200);
      });
    });
  });
  field("team").addEventListener("change", reloadGrid);
  checkWindow();
})();
