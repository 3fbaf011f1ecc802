// Availability grid: clicking a day fills the reservation form with that class and day
// (local midnight to the next midnight; today starts at the next quarter hour).
(function () {
  "use strict";
  var grid = document.getElementById("availability");
  var form = document.getElementById("reservation-form");
  if (!grid || !form) { return; }
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function local(d) {
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + "T" +
      pad(d.getHours()) + ":" + pad(d.getMinutes());
  }
  function nextDay(day) {
    var parts = day.split("-").map(Number);
    var d = new Date(Date.UTC(parts[0], parts[1] - 1, parts[2] + 1));
    return d.toISOString().slice(0, 10);
  }
  grid.addEventListener("click", function (event) {
    var cell = event.target.closest("td[data-day]");
    if (!cell) { return; }
    grid.querySelectorAll("td.picked").forEach(function (c) { c.classList.remove("picked"); });
    cell.classList.add("picked");
    var day = cell.getAttribute("data-day");
    var start = day + "T00:00";
    var now = new Date();
    if (local(now).slice(0, 10) === day) {
      now.setMinutes(Math.ceil((now.getMinutes() + 1) / 15) * 15, 0, 0);
      start = local(now);
    }
    form.querySelector("[name=gpu_class]").value = cell.getAttribute("data-class");
    form.querySelector("[name=start]").value = start;
    form.querySelector("[name=end]").value = nextDay(day) + "T00:00";
    form.querySelector("[name=count]").focus();
    checkWindow();
  });

  // Live hint: how many GPUs of the class are free over the typed window (server
  // reads the times in the user's time zone and refuses DST-ambiguous ones).
  var hint = document.getElementById("window-hint");
  var timer = null;
  function checkWindow() {
    if (!hint) { return; }
    var start = form.querySelector("[name=start]").value;
    var end = form.querySelector("[name=end]").value;
    var cls = form.querySelector("[name=gpu_class]").value;
    if (!start || !end || !cls) { hint.textContent = ""; return; }
    var params = new URLSearchParams({gpu_class: cls, start: start, end: end});
    fetch(hint.getAttribute("data-url") + "?" + params.toString(), {credentials: "same-origin"})
      .then(function (response) { return response.json(); })
      .then(function (data) {
        if (data.errors) {
          hint.className = "errorlist";
          hint.textContent = Object.values(data.errors).join(" ");
        } else if (data.error) {
          hint.className = "errorlist";
          hint.textContent = data.error;
        } else {
          var wanted = parseInt(form.querySelector("[name=count]").value || "0", 10);
          hint.className = "helptext" + (wanted > data.free_gpus ? " errorlist" : "");
          hint.textContent = data.free_gpus + " of " + data.total_gpus + " " + data.gpu_class +
            " GPUs are free for this whole window.";
        }
      })
      .catch(function () { hint.textContent = ""; });
  }
  ["start", "end", "gpu_class", "count"].forEach(function (name) {
    form.querySelector("[name=" + name + "]").addEventListener("change", function () {
      clearTimeout(timer);
      timer = setTimeout(checkWindow, 150);
    });
  });
  checkWindow();
})();
