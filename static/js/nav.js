// The header's menus (<details class="navgroup">) and in-page confirmations (<details
// class="confirm">) work without this; it makes them behave like menus: opening one closes
// the others, and a click elsewhere or Escape closes them.
(function () {
  "use strict";
  var POPUPS = "details.navgroup, details.confirm";
  function groups() { return document.querySelectorAll(POPUPS); }
  document.addEventListener("toggle", function (event) {
    var opened = event.target;
    if (!opened.matches || !opened.matches(POPUPS) || !opened.open) { return; }
    groups().forEach(function (group) { if (group !== opened) { group.open = false; } });
  }, true);
  document.addEventListener("click", function (event) {
    groups().forEach(function (group) {
      if (group.open && !group.contains(event.target)) { group.open = false; }
    });
  });
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") { return; }
    groups().forEach(function (group) {
      if (group.open) { group.open = false; group.querySelector("summary").focus(); }
    });
  });
})();
