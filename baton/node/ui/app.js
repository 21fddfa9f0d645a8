// baton's dashboard: one page, no framework, no build step.
//
// Safety rules this file keeps:
// - every name and value from the node is put in the page with textContent (or as an SVG
//   text node), never as markup: a node named "<script>" shows as those characters;
// - the cluster token lives in sessionStorage (this tab only) and travels in an
//   Authorization header or the socket's first frame, never in a URL;
// - operations call the same /v1/cascade routes as the command line, after a confirmation.
"use strict";

const KEY = "baton.token";
const VIEWS = ["nodes", "placement", "cascade", "channels", "failover", "timeline"];
const PLOT_WINDOW = 300; // seconds of lag history drawn
const GAP = 30; // seconds between two lag points that mean nobody watched in between
const COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2", "#be185d"];

const state = {
  socket: null,
  snapshot: null,
  version: 0,
  retry: 1000,
  // When the socket's last snapshot arrived (performance.now()), for "updated ... ago".
  receivedAt: 0,
};

// -- building the page: text only -------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "onclick") node.addEventListener("click", v);
    else if (k === "dataset") Object.assign(node.dataset, v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function $(id) {
  return document.getElementById(id);
}

function table(id, headers, rows) {
  const t = $(id);
  t.replaceChildren(
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows : [el("tr", {}, el("td", { colspan: headers.length, class: "muted" }, "none"))]),
  );
}

function badge(text, kind) {
  return el("span", { class: `badge ${kind || text}` }, text);
}

function when(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const d = new Date(seconds * 1000);
  return d.toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

function epochText(epoch) {
  return epoch ? epoch.text : "—";
}

// -- the token and the data routes -------------------------------------------------------------

function token() {
  return sessionStorage.getItem(KEY);
}

async function api(method, path, body) {
  const init = { method, headers: { Authorization: `Bearer ${token()}` }, cache: "no-store" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  let data = null;
  try {
    data = await res.json();
  } catch (e) {
    data = null;
  }
  if (res.status === 401) {
    signOut("The node refused the token: sign in with its cluster token.");
    throw new Error("unauthorized");
  }
  if (!res.ok) {
    throw new Error(detail(data) || `the node answered ${res.status}`);
  }
  return data;
}

function detail(data) {
  if (!data || data.detail === undefined) return "";
  if (typeof data.detail === "string") return data.detail;
  return data.detail.map((d) => `${(d.loc || []).join(".")}: ${d.msg}`).join("; ");
}

// -- sign in and out ---------------------------------------------------------------------------

async function signIn(event) {
  event.preventDefault();
  const given = $("token").value;
  $("token").value = "";
  $("login-error").textContent = "";
  sessionStorage.setItem(KEY, given);
  try {
    const res = await fetch("/v1/ui/snapshot", {
      headers: { Authorization: `Bearer ${given}` },
      cache: "no-store",
    });
    if (res.status === 401) {
      signOut("Wrong token: use this node's cluster token (token or token_file in its config).");
      return;
    }
    if (!res.ok) throw new Error(`the node answered ${res.status}`);
    show(await res.json(), 0);
    start();
  } catch (e) {
    signOut(`Cannot reach the node: ${e.message}.`);
  }
}

function signOut(message) {
  sessionStorage.removeItem(KEY);
  if (state.socket) {
    const s = state.socket;
    state.socket = null;
    s.close(1000);
  }
  state.snapshot = null;
  $("login").hidden = false;
  $("tabs").hidden = true;
  $("logout").hidden = true;
  $("live").hidden = true;
  $("notice").hidden = true;
  $("errors").hidden = true;
  for (const v of VIEWS) $(`view-${v}`).hidden = true;
  $("login-error").textContent = message || "";
  document.body.dataset.state = message ? "refused" : "signed-out";
}

function start() {
  $("login").hidden = true;
  $("tabs").hidden = false;
  $("logout").hidden = false;
  $("live").hidden = false;
  route();
  connect();
}

// -- live updates --------------------------------------------------------------------------------

function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const socket = new WebSocket(`${scheme}://${location.host}/v1/ui/ws`);
  state.socket = socket;
  socket.addEventListener("open", () => {
    socket.send(JSON.stringify({ type: "auth", token: token() }));
    state.retry = 1000;
  });
  socket.addEventListener("message", (event) => {
    const message = JSON.parse(event.data);
    if (message.type === "snapshot") show(message.data, message.version);
  });
  socket.addEventListener("close", (event) => {
    if (state.socket !== socket) return; // signed out, or replaced
    state.socket = null;
    document.body.dataset.socket = "closed";
    if (event.code === 1008) {
      signOut("The node refused the token: sign in with its cluster token.");
      return;
    }
    setLive(`connection lost; trying again in ${Math.round(state.retry / 1000)} s`, "down");
    setTimeout(() => {
      if (token() && !state.socket) connect();
    }, state.retry);
    state.retry = Math.min(state.retry * 2, 10000);
  });
  document.body.dataset.socket = "open";
}

function setLive(text, kind) {
  const live = $("live");
  live.textContent = text;
  live.className = `live ${kind}`;
}

function show(snapshot, version) {
  state.snapshot = snapshot;
  state.version = version;
  state.receivedAt = performance.now();
  document.body.dataset.version = String(version);
  document.body.dataset.state = "signed-in";
  $("node").textContent = `node ${snapshot.node}`;
  setLive(`live · ${when(snapshot.at).slice(11)}`, "up");
  const errors = Object.values(snapshot.errors || {});
  $("errors").hidden = errors.length === 0;
  $("errors").textContent = errors.join(" · ");
  renderNodes(snapshot);
  renderPlacement(snapshot);
  renderCascade(snapshot);
  renderChannels(snapshot);
  renderFailover(snapshot);
  renderTimeline(snapshot);
}

// -- views -----------------------------------------------------------------------------------------

function route() {
  const wanted = location.hash.slice(1);
  const view = VIEWS.includes(wanted) ? wanted : "nodes";
  for (const v of VIEWS) $(`view-${v}`).hidden = v !== view || !token();
  for (const a of document.querySelectorAll("#tabs a")) {
    a.classList.toggle("active", a.dataset.view === view);
  }
}

function renderNodes(s) {
  const ctl = s.controller;
  $("controller").replaceChildren(
    el("strong", {}, "Controller "),
    ctl ? el("span", { class: "name" }, ctl.id) : el("span", { class: "error" }, "none elected"),
    ctl ? el("span", { class: "muted" }, ` · epoch ${epochText(ctl.epoch)}`) : null,
  );
  table(
    "nodes-table",
    ["node", "state", "address", "membership epoch", "labels", "workload types", "version"],
    s.nodes.map((n) =>
      el(
        "tr",
        { dataset: { node: n.id } },
        el("td", { class: "name" }, n.id, ctl && ctl.id === n.id ? badge("controller", "leader") : null),
        el("td", {}, badge(n.state)),
        el("td", {}, n.address),
        el("td", {}, epochText(n.epoch)),
        el("td", {}, Object.entries(n.labels || {}).map(([k, v]) => `${k}=${v}`).join(", ")),
        el("td", {}, (n.types || []).join(", ")),
        el("td", {}, n.version),
      ),
    ),
  );
}

function renderPlacement(s) {
  const objects = new Map((s.objects || []).map((o) => [o.name, o]));
  table(
    "groups-table",
    ["group", "type", "leader", "term", "members", "state"],
    s.groups.map((g) =>
      el(
        "tr",
        { dataset: { group: g.group } },
        el("td", { class: "name" }, g.group),
        el("td", {}, g.type),
        el("td", { class: "name" }, g.leader || "—"),
        el("td", {}, epochText(g.term)),
        el("td", {}, g.members.join(", ")),
        el("td", {}, badge(g.state), g.detail ? el("span", { class: "muted" }, ` ${g.detail}`) : null),
      ),
    ),
  );
  const unplaced = [...objects.keys()].filter((name) => !s.groups.some((g) => g.group.startsWith(`${name}/`)));
  if (unplaced.length) {
    $("groups-table").append(el("caption", { class: "muted" }, `objects not placed yet: ${unplaced.join(", ")}`));
  }
}

function renderCascade(s) {
  const box = $("sets");
  if (!s.sets.length) {
    box.replaceChildren(
      el("p", { class: "muted" }, "No cascade set known to the cluster (sets are found through placed cascade-worker objects and the members agents serve)."),
    );
    return;
  }
  box.replaceChildren(...s.sets.map((set) => renderSet(s, set)));
}

function renderSet(s, set) {
  const head = el(
    "div",
    { class: "set-head" },
    el("h3", { class: "name" }, set.set),
    set.error ? null : el("span", {}, "root ", el("strong", { class: "name" }, set.root || "none (fail over)")),
    set.error ? null : el("span", { class: "muted" }, `watermark ${set.global_watermark ?? "—"} · sync ${set.sync}`),
    set.error ? null : el("span", {}, "auto-failover ", badge(set.auto_failover ? "on" : "off")),
    set.error || !set.via
      ? null
      : el(
          "button",
          { type: "button", class: "op", dataset: { op: "auto-failover", set: set.set }, onclick: () => askAutoFailover(set) },
          set.auto_failover ? "Turn auto-failover off" : "Turn auto-failover on",
        ),
  );
  const card = el("article", { class: "set", dataset: { set: set.set } }, head);
  if (set.error) {
    card.append(el("p", { class: "error" }, set.error));
    return card;
  }
  if (!set.via) {
    card.append(el("p", { class: "muted" }, "Every location of this set holds a password: run its operations with the command line."));
  }
  card.append(tree(set), plot(s, set));
  return card;
}

function tree(set) {
  const names = new Set(set.members.map((m) => m.name));
  const children = new Map();
  const tops = [];
  for (const m of set.members) {
    if (m.provider && names.has(m.provider)) {
      if (!children.has(m.provider)) children.set(m.provider, []);
      children.get(m.provider).push(m);
    } else {
      tops.push(m);
    }
  }
  // The set's root first; after a failover the old root still says "root" until it is
  // resurrected, so it comes after (with the members whose provider is not in the set: dead,
  // or unreadable), each group by name. One rank per member keeps the order total.
  const rank = (m) => (m.name === set.root ? 0 : m.role === "root" && !m.dead ? 1 : 2);
  tops.sort((a, b) => rank(a) - rank(b) || a.name.localeCompare(b.name));
  const branch = (m, depth) =>
    el("li", {}, member(set, m, depth), (children.get(m.name) || []).length ? el("ul", {}, children.get(m.name).map((c) => branch(c, depth + 1))) : null);
  return el("ul", { class: "tree" }, tops.map((m) => branch(m, 0)));
}

function member(set, m, depth) {
  const service = m.service || {};
  const worker = service.state === "running" ? `${service.state} (${service.phase})` : service.state || "never";
  const lag =
    m.role === "root"
      ? "makes the ticks"
      : m.lag_ticks === null
        ? "lag unknown"
        : `lag ${m.lag_ticks} ticks, ${m.lag_seconds === null ? "?" : m.lag_seconds} s`;
  const ops = [];
  if (set.via && m.role !== "root" && !m.dead) {
    ops.push(
      m.paused
        ? el("button", { type: "button", class: "op", dataset: { op: "resume", node: m.name }, onclick: () => askPause(set, m, false) }, "Resume")
        : el("button", { type: "button", class: "op", dataset: { op: "pause", node: m.name }, onclick: () => askPause(set, m, true) }, "Pause"),
    );
  }
  if (set.via && m.role === "branch" && set.root && !m.dead) {
    ops.push(el("button", { type: "button", class: "op danger", dataset: { op: "switchover", node: m.name }, onclick: () => askSwitchover(set, m) }, "Switchover here"));
  }
  return el(
    "div",
    { class: `member ${m.role}`, dataset: { member: m.name, role: m.role, depth: String(depth) } },
    el("div", { class: "member-head" }, el("strong", { class: "name" }, m.name), badge(m.role), m.paused ? badge("paused") : null, m.dead ? badge("dead") : null, m.reachable ? null : badge("unreachable", "dead")),
    el("div", { class: "muted" }, `tick ${m.position} · ${lag}`),
    Object.keys(m.tables || {}).length
      ? el("div", { class: "tables" }, "tables ", Object.entries(m.tables).map(([t, st]) => el("span", { class: "table-state" }, el("span", { class: "name" }, t), badge(st))))
      : null,
    el("div", {}, "worker ", badge(worker, service.state || "never"), m.agent ? el("span", { class: "muted" }, ` on ${m.agent}`) : null, m.standby.length ? el("span", { class: "muted" }, ` · standby ${m.standby.join(", ")}`) : null),
    service.error ? el("div", { class: "error" }, service.error) : null,
    m.switching_to ? el("div", { class: "notice" }, `switching to ${m.switching_to}`) : null,
    ops.length ? el("div", { class: "ops" }, ops) : null,
  );
}

function plot(s, set) {
  const width = 640;
  const height = 150;
  const pad = { left: 40, right: 10, top: 10, bottom: 20 };
  const now = s.at;
  const series = set.members
    .filter((m) => m.role !== "root")
    .map((m) => ({ name: m.name, points: (s.lag[`${set.set}/${m.name}`] || []).filter((p) => p[1] !== null) }));
  const max = Math.max(1, ...series.flatMap((x) => x.points.map((p) => p[1])));
  const x = (t) => pad.left + ((t - (now - PLOT_WINDOW)) / PLOT_WINDOW) * (width - pad.left - pad.right);
  const y = (v) => height - pad.bottom - (v / max) * (height - pad.top - pad.bottom);
  const box = svg("svg", { viewBox: `0 0 ${width} ${height}`, class: "plot", role: "img" });
  box.append(svg("title", {}, `lag of each member of ${set.set} over the last ${PLOT_WINDOW / 60} minutes`));
  box.append(svg("line", { x1: pad.left, y1: y(0), x2: width - pad.right, y2: y(0), class: "axis" }));
  box.append(svg("line", { x1: pad.left, y1: pad.top, x2: pad.left, y2: y(0), class: "axis" }));
  box.append(svg("text", { x: pad.left - 4, y: pad.top + 8, "text-anchor": "end", class: "tick" }, `${max.toFixed(max < 10 ? 1 : 0)} s`));
  box.append(svg("text", { x: pad.left - 4, y: y(0), "text-anchor": "end", class: "tick" }, "0"));
  box.append(svg("text", { x: pad.left, y: height - 4, class: "tick" }, `-${PLOT_WINDOW / 60} min`));
  box.append(svg("text", { x: width - pad.right, y: height - 4, "text-anchor": "end", class: "tick" }, "now"));
  series.forEach((line, i) => {
    // A step line: each value holds until the next point (the last one until now), but not
    // across a gap: the node records a point at least every 15 s while a page is open, so a
    // longer gap is a time nobody watched, drawn as nothing.
    let coords = [];
    const draw = () => {
      if (coords.length) box.append(svg("polyline", { points: coords.join(" "), fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 2 }));
      coords = [];
    };
    line.points.forEach((p, j) => {
      const t = Math.max(p[0], now - PLOT_WINDOW);
      const next = j + 1 < line.points.length ? line.points[j + 1][0] : now;
      const until = next - p[0] > GAP ? p[0] : next;
      coords.push(`${x(t).toFixed(1)},${y(p[1]).toFixed(1)}`, `${x(until).toFixed(1)},${y(p[1]).toFixed(1)}`);
      if (until !== next) draw();
    });
    draw();
  });
  const legend = el(
    "div",
    { class: "legend" },
    series.map((line, i) => el("span", {}, el("span", { class: `swatch c${i % COLORS.length}` }), ` ${line.name}`)),
  );
  return el("figure", { class: "lag" }, el("figcaption", { class: "muted" }, `lag (seconds), last ${PLOT_WINDOW / 60} minutes`), box, legend);
}

function renderChannels(s) {
  table(
    "channels-table",
    ["channel", "leader", "epoch", "offset", "subscribers per node"],
    s.channels.map((c) =>
      el(
        "tr",
        { dataset: { channel: c.channel } },
        el("td", { class: "name" }, c.channel),
        el("td", { class: "name" }, c.leader || "—"),
        el("td", {}, epochText(c.epoch)),
        el("td", {}, c.offset === null ? "—" : String(c.offset)),
        el("td", {}, Object.entries(c.subscribers || {}).map(([node, n]) => `${node}: ${n}`).join(", ") || "none"),
      ),
    ),
  );
}

function renderFailover(s) {
  const f = s.store_failover;
  const box = $("failover");
  if (!f.configured) {
    box.replaceChildren(el("p", { class: "muted" }, `Store failover is not configured on ${s.node} (its [redis_failover] table). Each node shows its own roles.`));
    return;
  }
  const parts = [];
  if (f.server) {
    parts.push(
      el("div", { class: "card" }, el("strong", {}, "Configuration server "), el("span", { class: "name" }, f.server.server), ` · master ${f.server.master || "unknown"} · generation ${f.server.generation}`),
    );
    for (const alert of f.server.alerts || []) parts.push(el("p", { class: "error" }, alert));
  }
  if (f.client) {
    parts.push(el("div", { class: "card" }, el("strong", {}, "Client "), el("span", { class: "name" }, f.client.id), ` · master file ${f.client.master_file}: ${f.client.master || "no master"}`));
  }
  const rows = f.rounds.map((r) =>
    el("tr", {}, el("td", {}, when(r.at)), el("td", {}, badge(r.outcome, r.outcome === "switched" ? "ok" : "failure")), el("td", {}, r.old || "—"), el("td", {}, r.new || "—"), el("td", {}, r.seconds === undefined ? "—" : `${r.seconds} s`), el("td", {}, r.step || "")),
  );
  const t = el("table", { id: "rounds-table" });
  parts.push(el("h3", {}, "Rounds"), t);
  box.replaceChildren(...parts);
  table("rounds-table", ["at", "outcome", "old master", "new master", "took", "step"], rows);
}

function renderTimeline(s) {
  table(
    "timeline-table",
    ["when", "what", "leader", "before", "epoch"],
    s.timeline.map((e) =>
      el(
        "tr",
        { dataset: { kind: e.kind } },
        el("td", {}, e.at ? when(e.at) : "—", e.held ? el("span", { class: "muted" }, " (held since)") : null),
        el("td", {}, `${e.kind} `, el("span", { class: "name" }, e.kind === "controller" ? "" : e.name)),
        el("td", { class: "name" }, e.leader || "none"),
        el("td", { class: "name" }, e.previous || "—"),
        el("td", {}, epochText(e.epoch)),
      ),
    ),
  );
}

// -- operations, behind a confirmation -------------------------------------------------------------

function confirmDialog(title, body, ok, action) {
  const dialog = $("confirm");
  $("confirm-title").textContent = title;
  $("confirm-body").replaceChildren(...body);
  $("confirm-error").textContent = "";
  const button = $("confirm-ok");
  button.textContent = ok || "Confirm";
  button.disabled = !action;
  button.onclick = async (event) => {
    event.preventDefault();
    button.disabled = true;
    $("confirm-error").textContent = "";
    try {
      const said = await action();
      dialog.close();
      notice(said);
    } catch (e) {
      $("confirm-error").textContent = e.message;
      button.disabled = false;
    }
  };
  $("confirm-cancel").onclick = (event) => {
    event.preventDefault();
    dialog.close();
  };
  dialog.showModal();
  return dialog;
}

function notice(text) {
  $("notice").textContent = text;
  $("notice").hidden = false;
}

function askPause(set, m, pause) {
  const verb = pause ? "pause" : "resume";
  confirmDialog(
    `${pause ? "Pause" : "Resume"} ${m.name}?`,
    [el("p", {}, pause ? `${m.name}'s worker applies nothing until it is resumed; its subscribers fall behind with it.` : `${m.name}'s worker applies again from tick ${m.position}.`)],
    pause ? "Pause" : "Resume",
    async () => {
      await api("POST", `/v1/cascade/${verb}`, { via: set.via, node: m.name });
      return `${m.name}: ${pause ? "paused" : "resumed"}`;
    },
  );
}

function askAutoFailover(set) {
  const on = !set.auto_failover;
  confirmDialog(
    `Turn automatic failover of ${set.set} ${on ? "on" : "off"}?`,
    [el("p", {}, on ? "When the root's node is lost, the elected actor of the node agents promotes the most advanced branch." : "A lost root then waits for an operator's failover.")],
    on ? "Turn on" : "Turn off",
    async () => {
      await api("POST", "/v1/cascade/auto-failover", { via: set.via, set: set.set, state: on ? "on" : "off" });
      return `${set.set}: automatic failover ${on ? "on" : "off"}`;
    },
  );
}

async function askSwitchover(set, m) {
  const dialog = confirmDialog(`Switchover: ${m.name} becomes the root of ${set.set}?`, [el("p", { class: "muted" }, "Checking (a dry run: nothing changes)...")], "Switch over", null);
  let plan;
  try {
    plan = await api("POST", "/v1/cascade/switchover", { via: set.via, new_root: m.name, dry_run: true });
  } catch (e) {
    $("confirm-body").replaceChildren(el("p", {}, "The pre-check refused it; nothing was changed:"));
    $("confirm-error").textContent = e.message;
    return;
  }
  if (!dialog.open) return;
  $("confirm-body").replaceChildren(
    el("p", {}, `Pre-check passed: ${plan.new_root} is ${plan.behind} tick(s) behind ${plan.root}.`, plan.under_way ? ` A switchover begun at tick ${plan.under_way} is under way.` : ""),
    el("ol", { class: "steps" }, plan.steps.map((step) => el("li", {}, step))),
    el("p", { class: "muted" }, "Writes at the old root are refused from the switch tick until the new root takes over."),
  );
  const button = $("confirm-ok");
  button.disabled = false;
  button.onclick = async (event) => {
    event.preventDefault();
    button.disabled = true;
    try {
      const done = await api("POST", "/v1/cascade/switchover", { via: set.via, new_root: m.name });
      dialog.close();
      notice(done.already ? `${done.new_root} was the root already` : `switchover done: ${done.new_root} is the root from tick ${done.tick}, ${done.old_root} its branch`);
    } catch (e) {
      $("confirm-error").textContent = e.message;
      button.disabled = false;
    }
  };
}

// -- start ----------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", signIn);
  $("logout").addEventListener("click", () => signOut(""));
  window.addEventListener("hashchange", route);
  if (token()) {
    api("GET", "/v1/ui/snapshot")
      .then((snapshot) => {
        show(snapshot, 0);
        start();
      })
      .catch(() => {});
  } else {
    signOut("");
  }
});
