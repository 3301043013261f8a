// The page's logic: load a proof or an evidence directory, hand it with the reader's key and
// question to the verifier (sion_verify in WebAssembly, crates/sion_web: a byte ABI, no glue),
// and show the verdict, the statement in metres and UTC, and a drawing from above.
// `?conformance=MANIFEST_URL[&report=URL]` runs every case of a conformance suite instead and,
// with report, POSTs the results there (tests/viewers/test_web.py).
"use strict";

let wasm = null;
let loaded = null; // { name, proof: Uint8Array, blobs: [[name, Uint8Array]], keyHint }
let lastAnswer = null;
let loadedMissing = [];   // payloads of the answer an evidence directory at a URL does not hold
let keyFromLink = false;  // the key came with the link, not from the reader

async function loadVerifier() {
  // SION_VERIFY_WASM_BASE64 (sion_verify_wasm.js) carries the module, so the page also works
  // opened from disk, where a browser fetches nothing.
  const bytes = Uint8Array.from(atob(SION_VERIFY_WASM_BASE64), (c) => c.charCodeAt(0));
  const { instance } = await WebAssembly.instantiate(bytes, {});
  wasm = instance.exports;
}

function u32(n) {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n, true);
  return b;
}

// The request of crates/sion_web: length-prefixed proof, key, question, then the payloads.
function request(proof, key, question, blobs) {
  const enc = new TextEncoder();
  const parts = [proof, key, enc.encode(JSON.stringify(question))];
  const out = [];
  for (const p of parts) { out.push(u32(p.length), p); }
  if (blobs.length) {
    out.push(u32(4), u32(blobs.length));
    for (const [name, bytes] of blobs) {
      const n = enc.encode(name);
      out.push(u32(n.length), n, u32(bytes.length), bytes);
    }
  }
  const len = out.reduce((a, b) => a + b.length, 0);
  const all = new Uint8Array(len);
  let at = 0;
  for (const b of out) { all.set(b, at); at += b.length; }
  return all;
}

function check(proof, keyHex, question, blobs) {
  const key = hexBytes(keyHex);
  const req = request(proof, key, question, blobs);
  const ptr = wasm.sion_input(req.length);
  if (!ptr) return { error: { code: "input", message: "too large for the verifier" } };
  new Uint8Array(wasm.memory.buffer, ptr, req.length).set(req);
  const n = wasm.sion_check(req.length);
  const out = new Uint8Array(wasm.memory.buffer, wasm.sion_output(), n);
  return JSON.parse(new TextDecoder().decode(out));
}

function hexBytes(hex) {
  const h = (hex || "").trim();
  if (!/^([0-9a-fA-F]{2})*$/.test(h)) return new Uint8Array(0);
  return Uint8Array.from(h.match(/../g) || [], (x) => parseInt(x, 16));
}

// ---- loading --------------------------------------------------------------------------------

async function readEntry(entry) {
  return new Promise((ok, fail) => entry.file((f) => f.arrayBuffer().then((b) => ok(new Uint8Array(b)), fail), fail));
}

async function listDir(entry) {
  const reader = entry.createReader();
  const all = [];
  for (;;) {
    const batch = await new Promise((ok, fail) => reader.readEntries(ok, fail));
    if (!batch.length) return all;
    all.push(...batch);
  }
}

async function fromDirectoryEntry(dir) {
  const entries = await listDir(dir);
  const proof = entries.find((e) => e.isFile && e.name === "answer.sionproof");
  if (!proof) throw new Error(`${dir.name}: no answer.sionproof (an evidence directory holds one)`);
  const blobs = [];
  const blobsDir = entries.find((e) => e.isDirectory && e.name === "blobs");
  if (blobsDir) {
    // Anything there that is not a file is given to the verifier by its name, to be refused.
    for (const e of await listDir(blobsDir)) blobs.push(e.isFile ? [e.name, await readEntry(e)] : [`${e.name}/`, new Uint8Array(0)]);
  }
  return { name: dir.name + "/", proof: await readEntry(proof), blobs };
}

async function fromFileList(files) {
  // A directory chosen with the picker: its files with their relative paths.
  const list = Array.from(files);
  const proof = list.find((f) => f.webkitRelativePath.split("/").length === 2 && f.name === "answer.sionproof");
  if (proof) {
    const blobs = [];
    for (const f of list) {
      const parts = f.webkitRelativePath.split("/");
      if (parts.length === 3 && parts[1] === "blobs") blobs.push([f.name, new Uint8Array(await f.arrayBuffer())]);
      else if (parts.length > 3 && parts[1] === "blobs") blobs.push([parts.slice(2).join("/"), new Uint8Array(0)]);
    }
    return { name: proof.webkitRelativePath.split("/")[0] + "/", proof: new Uint8Array(await proof.arrayBuffer()), blobs };
  }
  const f = list[0];
  return { name: f.name, proof: new Uint8Array(await f.arrayBuffer()), blobs: [] };
}

function setLoaded(l, missing = []) {
  loaded = l;
  loadedMissing = missing;
  document.getElementById("loaded").textContent =
    `${l.name}: a proof file of ${l.proof.length} bytes` + (l.blobs.length ? `, ${l.blobs.length} payloads in blobs/` : "");
}

function wireLoading() {
  const drop = document.getElementById("drop");
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", async (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    const item = e.dataTransfer.items[0];
    const entry = item && item.webkitGetAsEntry ? item.webkitGetAsEntry() : null;
    try {
      if (entry && entry.isDirectory) setLoaded(await fromDirectoryEntry(entry));
      else setLoaded(await fromFileList(e.dataTransfer.files));
    } catch (err) { document.getElementById("loaded").textContent = String(err.message || err); }
  });
  for (const id of ["file", "dir"]) {
    document.getElementById(id).addEventListener("change", async (e) => {
      if (e.target.files.length) setLoaded(await fromFileList(e.target.files));
    });
  }
}

// Only what the page's own server serves: a link cannot make the page fetch (or vouch for)
// anything from elsewhere.
function sameOrigin(url) {
  const u = new URL(url, location.href);
  if (u.origin !== location.origin || u.protocol === "data:") throw new Error(`${url}: not served beside this page`);
  return u;
}

async function openFromUrls(evidence, proofUrl) {
  const get = async (url) => {
    const r = await fetch(sameOrigin(url));
    if (!r.ok) throw new Error(`${url}: ${r.status}`);
    return new Uint8Array(await r.arrayBuffer());
  };
  if (proofUrl) { setLoaded({ name: proofUrl, proof: await get(proofUrl), blobs: [] }); return; }
  const base = sameOrigin(evidence.endsWith("/") ? evidence : evidence + "/");
  const proof = await get(new URL("answer.sionproof", base));
  // Which payloads to fetch comes from the proof (what it proves), not from answer.json, which
  // nothing checks: every atom of the answer with a blob has its payload in blobs/POSITION.
  const first = check(proof, document.getElementById("key").value, {}, []);
  const body = first.ok ? Object.values(first.ok.claim)[0] || {} : {};
  const blobs = [];
  const missing = [];
  for (const a of body.atoms || []) {
    if (!a.payload || !a.payload.blob) continue;
    const r = await fetch(new URL(`blobs/${a.position}`, base));
    if (r.ok) blobs.push([String(a.position), new Uint8Array(await r.arrayBuffer())]);
    else missing.push(a.position);
  }
  setLoaded({ name: base.pathname, proof, blobs }, missing);
}

// ---- showing --------------------------------------------------------------------------------

function question() {
  const q = {};
  for (const id of ["frame", "box", "from", "to"]) {
    const v = document.getElementById(id).value.trim();
    if (v) q[id] = v;
  }
  return q;
}

function showVerdict(answer) {
  const v = document.getElementById("verdict");
  const facts = document.getElementById("facts");
  facts.innerHTML = "";
  const fact = (k, val) => {
    if (val === undefined || val === null || val === "") return;
    const dt = document.createElement("dt"); dt.textContent = k;
    const dd = document.createElement("dd"); dd.textContent = val;
    facts.append(dt, dd);
  };
  if (answer.ok && keyFromLink) {
    v.className = "link-key";
    v.textContent = "✓ Verifies, but against the key the link gave: type the ledger key you trust and check again";
  } else if (answer.ok) {
    v.className = "valid";
    v.textContent = "✓ The proof verifies";
  }
  if (answer.ok) {
    fact("proves", answer.ok.statement);
    if (answer.scene) fact("asked", answer.scene.asked);
    fact("head", `${answer.ok.head.size} atoms, log root ${answer.ok.head.root}`);
    if (answer.ok.pulse) fact("ledger", `committed at Pulse ${answer.ok.pulse.number}, ${new Date(answer.ok.pulse.time_ns / 1e6).toISOString()}`);
    if (answer.blobs) fact("payloads", `${answer.blobs} in blobs/, each the one its atom commits to (BLAKE3)`);
    if (loadedMissing.length) fact("not here", `the payloads of atoms ${loadedMissing.join(", ")} are not in blobs/`);
  } else {
    v.className = "invalid";
    v.textContent = `✗ Does NOT verify (${answer.error.code})`;
    fact("why", answer.error.message);
    if (answer.scene) fact("asked", answer.scene.asked);
  }
  lastAnswer = answer;
  draw();
}

function rgba(c) { return `rgba(${c[0]},${c[1]},${c[2]},${(c[3] === undefined ? 255 : c[3]) / 255})`; }

function draw() {
  const canvas = document.getElementById("view");
  const g = canvas.getContext("2d");
  g.clearRect(0, 0, canvas.width, canvas.height);
  const answer = lastAnswer;
  if (!answer || !answer.scene) return;
  const s = answer.scene;
  // The extent drawn: the question as drawn, else everything the proof shows.
  const boxes = [...s.answer.map((a) => a.box), ...s.walk.map((w) => w.box)];
  const extent = s.drawn_question || boxes.reduce((e, b) => !e ? { min_mm: [...b.min_mm], max_mm: [...b.max_mm] } : {
    min_mm: e.min_mm.map((v, i) => Math.min(v, b.min_mm[i])), max_mm: e.max_mm.map((v, i) => Math.max(v, b.max_mm[i])) }, null);
  if (!extent) return;
  const pad = 30;
  const w = Math.max(1, extent.max_mm[0] - extent.min_mm[0]), h = Math.max(1, extent.max_mm[1] - extent.min_mm[1]);
  const scale = Math.min((canvas.width - 2 * pad) / w, (canvas.height - 2 * pad) / h);
  const x = (mm) => pad + (mm - extent.min_mm[0]) * scale;
  const y = (mm) => canvas.height - pad - (mm - extent.min_mm[1]) * scale;
  const rect = (b, colour, width, fill) => {
    const x0 = x(Math.max(b.min_mm[0], extent.min_mm[0] - w)), x1 = x(Math.min(b.max_mm[0], extent.max_mm[0] + w));
    const y0 = y(Math.min(b.max_mm[1], extent.max_mm[1] + h)), y1 = y(Math.max(b.min_mm[1], extent.min_mm[1] - h));
    g.lineWidth = width; g.strokeStyle = colour;
    if (fill) { g.fillStyle = fill; g.fillRect(x0, y0, Math.max(1, x1 - x0), Math.max(1, y1 - y0)); }
    g.strokeRect(x0, y0, Math.max(1, x1 - x0), Math.max(1, y1 - y0));
  };
  g.save();
  g.beginPath(); g.rect(0, 0, canvas.width, canvas.height - 22); g.clip();
  for (const layer of ["passed_over", "not_answering", "opened"]) {
    if (!document.getElementById(`show-${layer}`).checked) continue;
    for (const n of s.walk) if (n.layer === layer) rect(n.box, rgba(n.rgba), layer === "opened" ? 1.5 : 1);
  }
  // The largest first, so a pose stays visible on a camera's view; barely filled, as many overlap.
  const area = (b) => (b.max_mm[0] - b.min_mm[0]) * (b.max_mm[1] - b.min_mm[1]);
  for (const a of [...s.answer].sort((p, q) => area(q.box) - area(p.box))) rect(a.box, rgba([...a.rgb, 200]), 1.2, rgba([...a.rgb, 8]));
  if (s.drawn_question) rect(s.drawn_question, s.verified ? "#ffffff" : "#ff2828", 2.5);
  g.restore();
  // A scale bar: a round number of metres near a fifth of the width.
  const metres = (w / 1000) / 5, step = Math.pow(10, Math.floor(Math.log10(metres)));
  const bar = [1, 2, 5, 10].map((k) => k * step).find((v) => v >= metres) || step;
  g.strokeStyle = "#ccc"; g.fillStyle = "#ccc"; g.lineWidth = 2;
  g.beginPath(); g.moveTo(pad, canvas.height - 10); g.lineTo(pad + bar * 1000 * scale, canvas.height - 10); g.stroke();
  g.font = "12px system-ui"; g.fillText(`${bar} m`, pad + bar * 1000 * scale + 6, canvas.height - 6);
  g.fillText(`frame ${s.frame}`, pad, 16);
}

function showLegend(legend) {
  const el = document.getElementById("legend");
  el.innerHTML = "";
  for (const e of legend) {
    const sw = document.createElement("div"); sw.className = "swatch"; sw.style.background = rgba(e.rgba);
    const t = document.createElement("div"); t.textContent = `${e.name}: ${e.meaning}`;
    el.append(sw, t);
  }
}

// ---- conformance ----------------------------------------------------------------------------

async function runConformance(manifestUrl, reportUrl) {
  document.getElementById("conformance").hidden = false;
  const base = sameOrigin(manifestUrl);
  const manifest = await (await fetch(base)).json();
  const results = [];
  const table = document.getElementById("conformance-table");
  for (const c of manifest.cases) {
    const proof = new Uint8Array(await (await fetch(new URL(c.file, base))).arrayBuffer());
    const answer = check(proof, c.ledger_key, c.expect, []);
    const here = answer.ok ? "valid" : `invalid (${answer.error.code})`;
    const expected = c.verdict === "valid" ? "valid" : `invalid (${c.error})`;
    let agrees = here === expected;
    if (agrees && answer.ok) {
      const body = Object.values(answer.ok.claim)[0] || {};
      const atoms = body.atoms || null;
      agrees = answer.ok.statement === c.statement && answer.ok.head.size === c.head_size &&
        (!atoms || JSON.stringify(atoms.map((a) => a.position)) === JSON.stringify(c.atoms));
    }
    results.push({ file: c.file, expected, here, agrees, statement: answer.ok ? answer.ok.statement : null });
    const row = table.insertRow();
    for (const v of [c.file, expected, here, agrees ? "✓" : "✗ DISAGREES"]) row.insertCell().textContent = v;
  }
  const bad = results.filter((r) => !r.agrees).length;
  document.getElementById("conformance-summary").textContent =
    `${results.length} cases, ${results.length - bad} agree with the manifest, ${bad} disagree`;
  if (reportUrl) await fetch(sameOrigin(reportUrl), { method: "POST", body: JSON.stringify({ cases: results }) });
}

// ---- start ----------------------------------------------------------------------------------

async function main() {
  try {
    await loadVerifier();
  } catch (e) {
    document.getElementById("verdict").textContent = `The verifier did not load: ${e}`;
    return;
  }
  wireLoading();
  for (const layer of ["opened", "passed_over", "not_answering"]) {
    document.getElementById(`show-${layer}`).addEventListener("change", draw);
  }
  document.getElementById("key").addEventListener("input", () => { keyFromLink = false; });
  document.getElementById("check").addEventListener("click", () => {
    if (!loaded) { document.getElementById("loaded").textContent = "Load a proof or an evidence directory first."; return; }
    const answer = check(loaded.proof, document.getElementById("key").value, question(), loaded.blobs);
    showVerdict(answer);
    if (answer.legend) showLegend(answer.legend);
  });
  const params = new URLSearchParams(location.search);
  // `&layers=opened,passed_over`: the proof's layers shown from the start.
  for (const layer of (params.get("layers") || "").split(",")) {
    const box = document.getElementById(`show-${layer}`);
    if (box) box.checked = true;
  }
  if (params.get("evidence") || params.get("proof")) {
    // A link that opens an answer (served beside the page): `?evidence=DIR/&key=HEX` or
    // `?proof=FILE&key=HEX`, checked at once.
    let failed = null;
    try {
      // A key in the link is the sender's choice: the verdict says so (amber), and a reader
      // types the key they trust to have it count.
      document.getElementById("key").value = params.get("key") || "";
      keyFromLink = Boolean(params.get("key"));
      await openFromUrls(params.get("evidence"), params.get("proof"));
      document.getElementById("check").click();
    } catch (e) {
      failed = String(e.message || e);
      document.getElementById("loaded").textContent = failed;
    }
    const report = failed ? { error: { code: "input", message: failed } } : lastAnswer;
    if (params.get("report")) await fetch(sameOrigin(params.get("report")), { method: "POST", body: JSON.stringify(report) });
  }
  if (params.get("conformance")) {
    try {
      await runConformance(params.get("conformance"), params.get("report"));
    } catch (e) {
      if (params.get("report")) await fetch(sameOrigin(params.get("report")), { method: "POST", body: JSON.stringify({ error: String(e) }) });
    }
  }
}

main();
