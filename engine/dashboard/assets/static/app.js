// The dashboard's only script: no build step, no dependency.
(function () {
  "use strict";

  // The server writes times in UTC; show them in the reader's own zone.
  document.querySelectorAll("time[datetime]").forEach(function (el) {
    var d = new Date(el.getAttribute("datetime"));
    if (!isNaN(d.getTime())) {
      el.title = el.textContent;
      el.textContent = d.toLocaleString();
    }
  });

  // A page that asks for it (a run still moving) comes again every few
  // seconds while its tab is visible.
  var every = parseInt(document.body.dataset.refresh || "0", 10);
  if (every > 0) {
    var tick = function () {
      if (document.visibilityState === "visible") {
        location.reload();
      } else {
        setTimeout(tick, every * 1000);
      }
    };
    setTimeout(tick, every * 1000);
  }

  // A form that acts says so while it runs, and is not sent twice.
  document.querySelectorAll("form.act").forEach(function (form) {
    form.addEventListener("submit", function () {
      form.querySelectorAll("button").forEach(function (b) {
        b.disabled = true;
        if (b.dataset.busy) {
          b.textContent = b.dataset.busy;
        }
      });
    });
  });
})();
