// Stepstone's console: refreshes the live parts of a page. An element with
// `data-poll="URL"` is replaced, every `data-every` milliseconds, by what
// the server renders at URL (the server's own escaped HTML), until that
// holds an element marked `data-final` (a run that ended). Nothing is
// fetched while the page is hidden. A session that ended sends the page
// back to the sign-in form.
"use strict";

function poll(element) {
  const url = element.getAttribute("data-poll");
  const every = parseInt(element.getAttribute("data-every"), 10) || 2000;
  let busy = false;
  const timer = window.setInterval(async () => {
    if (busy || document.hidden) {
      return;
    }
    busy = true;
    try {
      const response = await fetch(url, {
        headers: { "X-Console-Fragment": "1" },
        credentials: "same-origin",
        cache: "no-store",
      });
      if (response.status === 401) {
        window.location.reload();
        return;
      }
      if (!response.ok) {
        return;
      }
      const html = await response.text();
      // Payloads opened by the reader stay open across a refresh.
      const open = [];
      element.querySelectorAll("details").forEach((details, index) => {
        if (details.open) {
          open.push(index);
        }
      });
      element.innerHTML = html;
      const fresh = element.querySelectorAll("details");
      open.forEach((index) => {
        if (fresh[index]) {
          fresh[index].open = true;
        }
      });
      element.setAttribute("data-refreshed", String(Date.now()));
      if (element.querySelector("[data-final]")) {
        window.clearInterval(timer);
      }
    } catch (_) {
      // The host is unreachable for now: the next tick tries again.
    } finally {
      busy = false;
    }
  }, every);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-poll]").forEach(poll);
});
