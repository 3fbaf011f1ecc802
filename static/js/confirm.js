// Forms that ask before they act: <form data-confirm="Cancel #12?">. The question is the
// attribute's text (escaped by the template like any attribute); nothing is sent unless
// the user agrees. Loaded on every page (base.html): the pages run no inline script, as
// their Content-Security-Policy requires.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.matches && form.matches("form[data-confirm]") &&
        !window.confirm(form.getAttribute("data-confirm"))) {
      event.preventDefault();
    }
  });
})();
