// The console's dead-letter page: planning receives each queue's messages (and releases them at
// once), so it is a POST with the console's own header, which no other site's page can send.
"use strict";
fetch("/dlq/plan", { method: "POST", headers: { "x-baton-console": "plan" } })
  .then((answer) => answer.text().then((html) => [answer.ok, html]))
  .catch((e) => [false, "<p>The console did not answer: " + String(e).replace(/[<&]/g, "") + "</p>"])
  .then(([ok, html]) => {
    document.getElementById("plans").innerHTML = html;
    document.body.setAttribute("data-planned", ok ? "true" : "false");
    document.body.setAttribute("data-scroll-width", String(document.documentElement.scrollWidth));
  });
