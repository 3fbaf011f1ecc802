// ReDoc's side menu shows "API docs by Redocly" with a logo image from its CDN; the docs'
// Content-Security-Policy blocks it and the browser logs an error on every visit. This
// runs before ReDoc: an <img> given an address on another origin gets none instead, so
// nothing is requested and nothing is refused (the text link stays).
(function () {
  "use strict";
  function foreign(url) {
    try { return new URL(url, document.baseURI).origin !== window.location.origin &&
                 /^https?:/.test(String(url)); }
    catch (e) { return false; }
  }
  var setAttribute = Element.prototype.setAttribute;
  Element.prototype.setAttribute = function (name, value) {
    if (this instanceof HTMLImageElement && String(name).toLowerCase() === "src" &&
        foreign(value)) {
      return setAttribute.call(this, "data-blocked-src", value);
    }
    return setAttribute.call(this, name, value);
  };
  var src = Object.getOwnPropertyDescriptor(HTMLImageElement.prototype, "src");
  Object.defineProperty(HTMLImageElement.prototype, "src", {
    configurable: true, enumerable: src.enumerable, get: src.get,
    set: function (value) {
      if (foreign(value)) { setAttribute.call(this, "data-blocked-src", value); return; }
      src.set.call(this, value);
    },
  });
})();
