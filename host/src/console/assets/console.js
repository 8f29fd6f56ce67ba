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
      document.dispatchEvent(new Event("console:refreshed"));
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

// The run page's streams: each stream the refreshed part names (an element
// with `data-stream="URL"`) is followed once, its values appended as text
// to a list of its own as the server sends them, until its `end`.
function followStreams() {
  const section = document.getElementById("streams");
  if (!section) {
    return;
  }
  document.querySelectorAll("[data-stream]").forEach((named) => {
    const url = named.getAttribute("data-stream");
    if (section.querySelector(`[data-events="${CSS.escape(url)}"]`)) {
      return;
    }
    section.querySelector("p.empty")?.remove();
    const box = document.createElement("div");
    box.className = "stream";
    box.setAttribute("data-events", url);
    const title = document.createElement("h3");
    title.textContent = named.textContent;
    const values = document.createElement("ol");
    values.start = 0;
    box.append(title, values);
    section.append(box);
    const events = new EventSource(url);
    events.addEventListener("value", (event) => {
      const item = document.createElement("li");
      item.textContent = event.data;
      values.append(item);
    });
    events.addEventListener("end", () => {
      events.close();
      box.setAttribute("data-ended", "");
    });
  });
}

document.addEventListener("DOMContentLoaded", followStreams);
document.addEventListener("console:refreshed", followStreams);
