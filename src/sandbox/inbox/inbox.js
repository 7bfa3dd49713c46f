// Live updates: the server names each message that changed; its card is fetched
// again and put in place (new ones on top). The buttons go as JSON, so the page stays.
(() => {
  const list = document.getElementById("messages");
  const live = document.getElementById("live");
  const query = new URLSearchParams(location.search).get("q") || "";

  async function refresh(id) {
    const answer = await fetch(`/sandbox/messages/${id}?q=${encodeURIComponent(query)}`);
    const old = document.getElementById(`m-${id}`);
    if (answer.status !== 200) {
      if (answer.status === 204 && old) old.remove();
      return;
    }
    const template = document.createElement("template");
    template.innerHTML = (await answer.text()).trim();
    const card = template.content.firstElementChild;
    if (old) {
      old.replaceWith(card);
    } else {
      document.getElementById("empty")?.remove();
      list.prepend(card);
    }
  }

  const events = new EventSource("/sandbox/events");
  events.addEventListener("open", () => {
    live.textContent = "live";
    live.classList.add("on");
  });
  events.addEventListener("error", () => {
    live.textContent = "live updates reconnecting…";
    live.classList.remove("on");
  });
  events.addEventListener("message", (event) => refresh(event.data));
  events.addEventListener("reload", () => location.reload());

  document.addEventListener("submit", async (event) => {
    const form = event.target.closest("form.end");
    if (!form) return;
    event.preventDefault();
    const button = event.submitter;
    const body = { status: button ? button.value : "" };
    if (body.status === "REPLIED") body.reply = form.elements.reply.value;
    const id = form.closest("article").dataset.id;
    const answer = await fetch(`/sandbox/api/messages/${id}/end`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    if (!answer.ok) {
      alert((await answer.json().catch(() => ({}))).error || `refused: HTTP ${answer.status}`);
      return;
    }
    refresh(id);
  });
})();
