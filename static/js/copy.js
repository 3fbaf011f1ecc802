// A "Copy" button (data-copy="<selector of the text to copy>") puts that text on the
// clipboard and says so (data-copied); where the clipboard API is not offered (a page
// served over plain HTTP to another machine), the text is selected and copied the old way.
(function () {
  "use strict";
  function done(button) {
    var label = button.textContent;
    button.textContent = button.getAttribute("data-copied") || "Copied";
    setTimeout(function () { button.textContent = label; }, 2000);
  }
  function selectText(element) {
    var range = document.createRange();
    range.selectNodeContents(element);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    var source = document.querySelector(button.getAttribute("data-copy"));
    if (!source) { return; }
    button.addEventListener("click", function () {
      var text = source.textContent.trim();
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(function () { done(button); },
          function () { selectText(source); });
        return;
      }
      selectText(source);
      if (document.execCommand("copy")) { done(button); }
    });
  });
})();
