"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const KEY_STORE = "vaswani.apiKey";
  const MUTED = "#94a3b8", TEXT = "#1f2933", HILITE = "#b45309", HILITE_BG = "#fef3c7";
  // ColorBrewer "Blues": white -> dark blue. Keep in sync with .legend-bar in style.css.
  const STOPS = [[0, [255, 255, 255]], [0.25, [198, 219, 239]], [0.5, [107, 174, 214]],
    [0.75, [33, 113, 181]], [1, [8, 48, 107]]];
  const els = {
    source: $("source"), button: $("translate"), beam: $("beam"), nbest: $("nbest"),
    targetLanguage: $("target-language"), targetLanguageField: $("target-language-field"),
    sourceLanguage: $("source-language"), sourceLanguageField: $("source-language-field"),
    translation: $("translation"), alternatives: $("alternatives"), error: $("error"),
    canvas: $("heatmap"), wrap: $("heatmap-wrap"), layer: $("layer"), head: $("head"), sentence: $("sentence"),
    tooltip: $("tooltip"), hint: $("hint"), counter: $("counter"), apikey: $("apikey"), auth: $("auth"),
    glossary: $("glossary"), format: $("format"), file: $("file"), fileButton: $("translate-file"),
    fileStatus: $("file-status"), download: $("download"), minConfidence: $("min-confidence"),
  };
  let maxBeam = 16, defaultBeam = 4, maxChars = null, maxAttention = null, maxFile = null, busy = false;
  let sentences = []; // [{source, attention}] of the shown translation, one per sentence with attention
  let attention = null; // attention object of the sentence shown in the heatmap
  let hover = null; // {row, col} of the hovered cell
  let geom = null; // layout of the last drawing, for hit testing

  // ---- helpers -------------------------------------------------------------
  const getKey = () => { try { return sessionStorage.getItem(KEY_STORE) || ""; } catch { return ""; } };
  const setKey = (key) => { try { sessionStorage.setItem(KEY_STORE, key); } catch { /* unavailable */ } };
  function setError(message) {
    els.error.textContent = message || "";
    els.error.hidden = !message;
  }
  function setHint(message) {
    els.hint.textContent = message;
    els.hint.classList.toggle("warn", Boolean(message));
  }
  const clamp = (v, lo, hi) => Math.min(hi, Math.max(lo, v));
  const isNum = (v) => typeof v === "number" && Number.isFinite(v);
  const num = (n) => Number(n).toLocaleString("en-US");
  function readInt(input, lo, hi, fallback) {
    const v = Number.parseInt(input.value, 10);
    const out = Number.isFinite(v) ? clamp(v, lo, hi) : fallback;
    input.value = String(out);
    return out;
  }
  function compact(n) {
    for (const [size, unit] of [[1e9, "B"], [1e6, "M"], [1e3, "K"]]) {
      if (n >= size) return `${(n / size).toFixed(1).replace(/\.0$/, "")}${unit}`;
    }
    return String(n);
  }
  const element = (tag, className, textContent = "") =>
    Object.assign(document.createElement(tag), { className, textContent });
  function colour(v) {
    const x = clamp(isNum(v) ? v : 0, 0, 1);
    for (let i = 1; i < STOPS.length; i++) {
      const [p1, c1] = STOPS[i];
      if (x <= p1) {
        const [p0, c0] = STOPS[i - 1];
        const t = (x - p0) / (p1 - p0);
        return `rgb(${c0.map((c, k) => Math.round(c + (c1[k] - c) * t)).join(",")})`;
      }
    }
    return "rgb(8,48,107)";
  }

  // ---- API -----------------------------------------------------------------
  // A request with the API key; a failed one throws the server's own message (its JSON "error").
  async function send(path, options = {}) {
    const headers = { Accept: "application/json", ...(options.headers || {}) };
    const key = getKey();
    if (key) headers.Authorization = `Bearer ${key}`;
    const res = await fetch(path, { ...options, headers }).catch((err) => {
      throw new Error(`Network error: could not reach the server (${err.message}).`);
    });
    if (!res.ok) {
      const data = await res.json().catch(() => null);
      const err = new Error(data && typeof data.error === "string" ? data.error
        : `Request failed: HTTP ${res.status} ${res.statusText}`.trim());
      err.status = res.status;
      throw err;
    }
    return res;
  }

  async function api(path, options = {}) {
    const res = await send(path, options.body ? { ...options, headers: { "Content-Type": "application/json" } }
      : options);
    const data = await res.json().catch(() => null);
    if (data === null) throw new Error("The server sent an invalid (non-JSON) response.");
    return data;
  }

  function requireKey(message) {
    els.auth.hidden = false;
    setError(message || "This server requires an API key.");
    els.apikey.value = getKey();
    els.apikey.focus();
  }

  async function loadModel() {
    try {
      const model = await api("/v1/model");
      els.auth.hidden = true;
      setError("");
      applyModel(model);
    } catch (err) {
      const auth = err.status === 401;
      $("model-info").textContent = auth ? "API key required" : "Model information unavailable";
      if (auth) requireKey(err.message);
      else setError(`Could not load model information: ${err.message}`);
    }
  }

  function applyModel(m) {
    const src = m.source_language || null, tgt = m.target_language || null;
    const parts = [m.name || "model"];
    if (src || tgt) parts.push(`${src || "?"} → ${tgt || "?"}`);
    if (isNum(m.parameters)) parts.push(`${compact(m.parameters)} parameters`);
    const bleu = m.training && m.training.valid_bleu;
    if (isNum(bleu)) parts.push(`BLEU ${bleu.toFixed(1)} on validation`);
    $("model-info").textContent = parts.join(" · ");
    if (m.name) document.title = `${m.name} · vaswani serve`;

    const d = [];
    if (isNum(m.layers) && isNum(m.heads)) d.push(`${m.layers} layers × ${m.heads} heads`);
    if (isNum(m.d_model)) d.push(`d_model ${m.d_model}`);
    const v = m.vocabulary;
    if (v && isNum(v.source)) {
      const type = v.type ? `${String(v.type).toUpperCase()} ` : "";
      d.push(v.shared ? `${type}vocabulary ${num(v.source)} (shared)`
        : `${type}vocabulary ${num(v.source)} / ${num(v.target)}`);
    }
    if (m.decode && isNum(m.decode.length_penalty)) d.push(`length penalty ${m.decode.length_penalty}`);
    if (m.training && isNum(m.training.steps)) d.push(`${num(m.training.steps)} training steps`);
    $("model-details").textContent = d.join(" · ");

    $("source-lang").textContent = src ? `(${src})` : "";
    $("target-lang").textContent = tgt ? `(${tgt})` : "";
    if (src) els.source.lang = src;
    if (tgt) els.translation.lang = tgt;

    const limits = m.limits || {};
    if (isNum(limits.max_beam) && limits.max_beam >= 1) maxBeam = limits.max_beam;
    // A text is split into sentences by the server: the textarea takes a whole text (max_text_chars).
    const chars = isNum(limits.max_text_chars) ? limits.max_text_chars : limits.max_chars;
    if (isNum(chars) && chars > 0) els.source.maxLength = maxChars = chars;
    if (isNum(limits.max_attention_texts)) maxAttention = limits.max_attention_texts;
    if (isNum(limits.max_file_bytes)) maxFile = limits.max_file_bytes;
    // A multilingual model (>>lang<< tokens): the language every sentence is translated into.
    const languages = Array.isArray(m.target_languages) ? m.target_languages : [];
    els.targetLanguage.replaceChildren(...languages.map((code) => new Option(code, code)));
    els.targetLanguageField.hidden = languages.length === 0;
    // A many-to-many model (NLLB, M2M-100, mBART-50): each text names its own language too.
    const sources = Array.isArray(m.source_languages) ? m.source_languages : [];
    const detect = sources.length ? [new Option("Detect (auto)", "auto")] : [];
    els.sourceLanguage.replaceChildren(...detect, ...sources.map((code) => new Option(code, code)));
    els.sourceLanguageField.hidden = sources.length === 0;
    const pick = (select, codes, wanted) => {  // the model's own pair where it names one, e.g. deu_Latn → eng_Latn
      const code = codes.find((c) => wanted && c.toLowerCase().startsWith(wanted.toLowerCase()));
      if (code) select.value = code;
    };
    pick(els.sourceLanguage, sources, src);
    pick(els.targetLanguage, languages, tgt);
    defaultBeam = clamp(m.decode && isNum(m.decode.beam_size) ? m.decode.beam_size : 4, 1, maxBeam);
    els.beam.max = String(maxBeam);
    els.beam.value = els.nbest.max = String(defaultBeam);
    els.nbest.value = String(Math.min(3, defaultBeam));
    updateCounter();
  }

  // ---- translate -----------------------------------------------------------
  // The glossary box: "source = target" (or a tab between them) per line -> [[source, target], ...];
  // an error names the first line that is neither.
  function glossaryPairs() {
    const pairs = [];
    const lines = (els.glossary ? els.glossary.value : "").split(/\r?\n/);
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i].trim();
      if (!line || line.startsWith("#")) continue;
      const cut = line.includes("\t") ? line.indexOf("\t") : line.indexOf("=");
      const source = cut < 0 ? "" : line.slice(0, cut).trim(), target = cut < 0 ? "" : line.slice(cut + 1).trim();
      if (!source || !target) throw new Error(`Glossary line ${i + 1}: write "source term = target term".`);
      pairs.push([source, target]);
    }
    return pairs;
  }

  async function translate() {
    if (busy) return;
    const text = els.source.value;
    if (!text.trim()) {
      els.source.focus();
      return setHint("Enter a text to translate.");
    }
    setHint("");
    setError("");
    const beam = readInt(els.beam, 1, maxBeam, defaultBeam);
    els.nbest.max = String(beam);
    const nBest = readInt(els.nbest, 1, beam, Math.min(3, beam));
    let glossary;
    try {
      glossary = glossaryPairs();
    } catch (err) {
      return setError(err.message);
    }
    setBusy(true);
    els.canvas.dataset.drawn = "false";
    const request = (withAttention) => api("/v1/translate", {
      method: "POST",
      body: JSON.stringify({
        text: [text], beam, n_best: nBest, attention: withAttention,
        ...(els.targetLanguageField.hidden ? {} : { target_language: els.targetLanguage.value }),
        ...(els.sourceLanguageField.hidden ? {} : { source_language: els.sourceLanguage.value }),
        ...(glossary.length ? { glossary } : {}),
        ...(els.format.value !== "text" ? { format: els.format.value } : {}),
        ...(flagBelow() !== null ? { min_confidence: flagBelow() } : {}),
      }),
    });
    try {
      let data, note = "";
      try {
        data = await request(true);
      } catch (err) {
        // A text of more sentences than the server draws attention for: translate it without attention.
        if (err.status !== 422 || !/attention/.test(err.message)) throw err;
        data = await request(false);
        note = `Attention is shown for texts of up to ${maxAttention ?? "a few"} sentences.`;
      }
      const t = data.translations && data.translations[0];
      if (!t) throw new Error("The server returned no translation.");
      render(t, data.elapsed_ms);
      const missing = Array.isArray(t.missing_terms) ? t.missing_terms : [];
      if (missing.length) note = `${note} Not in the translation (no room within the length limit): ${missing.join(", ")}.`.trim();
      note = `${note} ${languageNote(t)}`.trim();
      setHint(note);
    } catch (err) {
      if (err.status === 401) requireKey(err.message);
      else setError(err.message);
    } finally {
      setBusy(false);
    }
  }

  // ---- files ---------------------------------------------------------------
  // The chosen file sent as a form (with the languages, beam and glossary of the text form); the translated file
  // comes back whole and is offered as a download named as the server names it (talk.de.en.srt).
  function downloadName(disposition, fallback) {
    const utf8 = /filename\*=UTF-8''([^;]+)/i.exec(disposition || "");
    if (utf8) { try { return decodeURIComponent(utf8[1]); } catch { /* fall through */ } }
    const plain = /filename="([^"]+)"/i.exec(disposition || "");
    return plain ? plain[1] : fallback;
  }

  async function translateFile() {
    if (busy) return;
    const file = els.file.files && els.file.files[0];
    setError("");
    if (!file) {
      els.fileStatus.textContent = "Choose a file to translate.";
      return els.file.focus();
    }
    if (maxFile && file.size > maxFile) {
      return setError(`${file.name}: ${num(file.size)} bytes, more than the ${num(maxFile)} this server takes.`);
    }
    let glossary;
    try {
      glossary = glossaryPairs();
    } catch (err) {
      return setError(err.message);
    }
    const form = new FormData();
    form.append("file", file, file.name);
    form.append("beam", String(readInt(els.beam, 1, maxBeam, defaultBeam)));
    if (!els.targetLanguageField.hidden) form.append("target_language", els.targetLanguage.value);
    if (!els.sourceLanguageField.hidden) form.append("source_language", els.sourceLanguage.value);
    if (glossary.length) form.append("glossary", JSON.stringify(glossary));
    busy = els.fileButton.disabled = els.button.disabled = true;
    els.download.hidden = true;
    els.fileStatus.textContent = `Translating ${file.name}…`;
    const started = performance.now();
    try {
      const res = await send("/v1/translate_file", { method: "POST", body: form });
      const blob = await res.blob();
      const name = downloadName(res.headers.get("Content-Disposition"), file.name);
      if (els.download.href) URL.revokeObjectURL(els.download.href);
      Object.assign(els.download, { href: URL.createObjectURL(blob), download: name, textContent: `Download ${name}` });
      els.download.hidden = false;
      els.fileStatus.textContent = `Translated in ${((performance.now() - started) / 1000).toFixed(1)} s.`;
    } catch (err) {
      els.fileStatus.textContent = "";
      if (err.status === 401) requireKey(err.message);
      else setError(err.message);
    } finally {
      busy = els.fileButton.disabled = els.button.disabled = false;
    }
  }

  function setBusy(on) {
    busy = els.button.disabled = on;
    els.button.textContent = on ? "Translating…" : "Translate";
    els.translation.setAttribute("aria-busy", String(on));
  }

  // The confidence under which a sentence is shaded (null: none asked for).
  function flagBelow() {
    const v = Number.parseFloat(els.minConfidence.value);
    return Number.isFinite(v) && v > 0 && v <= 1 ? v : null;
  }

  // What the server detected: a text's language (source "auto"), or sentences in another language than a
  // one-language model reads (translated anyway).
  function languageNote(t) {
    const parts = Array.isArray(t.sentences) ? t.sentences : [t];
    const d = t.detected_language;
    const notes = [];
    if (d && d.language) notes.push(`Detected: ${d.language} (${Math.round(100 * (d.probability || 0))}%).`);
    const others = parts.filter((s) => s.other_language).map((s) => s.other_language.language);
    if (others.length) {
      const n = others.length;
      notes.push(`${n} sentence${n > 1 ? "s" : ""} read as another language than the model's (${[...new Set(others)].join(", ")}).`);
    }
    return notes.join(" ");
  }

  // The translation's text with each low-confidence sentence shaded (found in order in the text; a sentence
  // whose text the markup changed is left unshaded), its confidence on hover.
  function fillTranslation(t) {
    const text = t.text || "";
    const parts = Array.isArray(t.sentences) ? t.sentences : [t];
    const nodes = [];
    let at = 0;
    for (const s of parts) {
      const piece = String(s.text || "");
      const i = piece ? text.indexOf(piece, at) : -1;
      if (i < 0 || !s.low_confidence) continue;
      if (i > at) nodes.push(document.createTextNode(text.slice(at, i)));
      const mark = element("mark", "low-confidence", piece);
      mark.title = `confidence ${isNum(s.confidence) ? s.confidence.toFixed(2) : "?"}: worth checking`;
      nodes.push(mark);
      at = i + piece.length;
    }
    nodes.push(document.createTextNode(text.slice(at)));
    els.translation.replaceChildren(...nodes);
  }

  function render(t, elapsedMs) {
    fillTranslation(t);
    els.translation.classList.remove("placeholder");
    $("truncated").hidden = !t.truncated;
    $("elapsed").textContent = isNum(elapsedMs) ? `${elapsedMs.toFixed(1)} ms` : "";

    const list = Array.isArray(t.n_best) && t.n_best.length ? t.n_best
      : [{ text: t.text, score: t.score, log_prob: t.log_prob }];
    els.alternatives.replaceChildren(...list.map((h, i) => {
      const bits = [];
      if (isNum(h.score)) bits.push(`score ${h.score.toFixed(3)}`);
      if (isNum(h.log_prob)) bits.push(`log p ${h.log_prob.toFixed(2)}`);
      const li = element("li", i === 0 ? "best" : "");
      li.append(element("span", "alt-text", h.text || ""), element("span", "alt-score", bits.join(" · ")));
      return li;
    }));
    $("results").hidden = false;

    // Each sentence has its own attention (a text is split into sentences); a text sent unsplit has one.
    const valid = (a) => a && Array.isArray(a.cross) && a.cross.length && Array.isArray(a.cross[0])
      && a.cross[0].length;
    const parts = Array.isArray(t.sentences) ? t.sentences : [{ source: els.source.value, attention: t.attention }];
    sentences = parts.filter((s) => valid(s.attention));
    hover = null;
    hideTooltip();
    if (sentences.length) {
      const label = (s, i) => {
        const source = String(s.source || "").trim();
        return `${i + 1}. ${source.length > 60 ? `${source.slice(0, 57)}…` : source}`;
      };
      fillSelect(els.sentence, sentences.map((s, i) => [String(i), label(s, i)]), "0");
      $("sentence-field").hidden = sentences.length < 2;
      showSentence();
      $("attention").hidden = false;
    } else {
      attention = geom = null;
      $("attention").hidden = true;
    }
  }

  function showSentence() {
    attention = (sentences[Number(els.sentence.value)] || sentences[0]).attention;
    hover = null;
    hideTooltip();
    populateSelectors();
    drawHeatmap();
  }

  // ---- heatmap -------------------------------------------------------------
  function fillSelect(select, options, selected) {
    select.replaceChildren(...options.map(([value, label]) => new Option(label, value)));
    select.value = selected;
  }

  function populateSelectors() {
    const layers = attention.cross.length, heads = attention.cross[0].length;
    const numbered = (n) => Array.from({ length: n }, (_, i) => [String(i + 1), String(i + 1)]);
    if (els.layer.options.length !== layers) fillSelect(els.layer, numbered(layers), String(layers));
    if (els.head.options.length !== heads + 1) {
      fillSelect(els.head, [["avg", "average of heads"], ...numbered(heads)], "avg");
    }
  }

  function currentMatrix() {
    const cross = attention.cross;
    const layer = cross[Number(els.layer.value) - 1] || cross[cross.length - 1];
    if (els.head.value !== "avg") return layer[Number(els.head.value) - 1] || layer[0];
    return layer[0].map((row, i) => row.map((_, j) => {
      let s = 0;
      for (const h of layer) s += (h[i] && h[i][j]) || 0;
      return s / layer.length;
    }));
  }

  // Draws a piece left-aligned at (x, y); the "▁" word marker and <special> pieces are muted.
  function drawPiece(ctx, piece, x, y, fill) {
    let rest = piece;
    if (rest.startsWith("▁")) {
      ctx.fillStyle = MUTED;
      ctx.fillText("▁", x, y);
      x += ctx.measureText("▁").width;
      rest = rest.slice(1);
    }
    ctx.fillStyle = /^<[^>]*>$/.test(piece) ? MUTED : fill;
    ctx.fillText(rest, x, y);
  }

  function drawHeatmap() {
    if (!attention) return;
    const canvas = els.canvas, ctx = canvas.getContext("2d");
    const srcP = (attention.source_pieces || []).map(String);
    const tgtP = (attention.target_pieces || []).map(String);
    const m = currentMatrix();
    const rows = tgtP.length || m.length, cols = srcP.length || (m[0] ? m[0].length : 0);
    const family = getComputedStyle(document.body).fontFamily || "sans-serif";
    const font = (bold) => `${bold ? "600 " : ""}12px ${family}`;
    const angle = Math.PI / 3;
    ctx.font = font(true);
    const widest = (arr) => arr.reduce((w, p) => Math.max(w, ctx.measureText(p).width), 0);
    const colW = widest(srcP);
    const left = Math.ceil(widest(tgtP)) + 12, top = Math.ceil(colW * Math.sin(angle)) + 12;
    const right = Math.ceil(colW * Math.cos(angle)) + 8;
    let cell = clamp(Math.floor((els.wrap.clientWidth - left - right) / Math.max(cols, 1)), 16, 40);
    // Browsers refuse canvases over ~32,000 device pixels a side: long sentences get smaller cells.
    const limit = 30000 / (window.devicePixelRatio || 1);
    cell = Math.max(2, Math.min(cell, Math.floor((limit - top) / Math.max(rows, 1)),
      Math.floor((limit - left - right) / Math.max(cols, 1))));
    const width = left + cell * cols + right, height = top + cell * rows + 4;
    const dpr = window.devicePixelRatio || 1;
    Object.assign(canvas, { width: Math.round(width * dpr), height: Math.round(height * dpr) });
    Object.assign(canvas.style, { width: `${width}px`, height: `${height}px` });
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);

    for (let i = 0; i < rows; i++) {
      for (let j = 0; j < cols; j++) {
        ctx.fillStyle = colour(m[i] && m[i][j]);
        ctx.fillRect(left + j * cell, top + i * cell, cell, cell);
      }
    }
    ctx.strokeStyle = "#cbd5e1";
    ctx.lineWidth = 1;
    ctx.strokeRect(left - 0.5, top - 0.5, cell * cols + 1, cell * rows + 1);

    ctx.textBaseline = "middle";
    ctx.textAlign = "left";
    tgtP.forEach((p, i) => {
      const on = hover && hover.row === i;
      ctx.font = font(on);
      if (on) { ctx.fillStyle = HILITE_BG; ctx.fillRect(0, top + i * cell, left - 4, cell); }
      drawPiece(ctx, p, left - 6 - ctx.measureText(p).width, top + i * cell + cell / 2, on ? HILITE : TEXT);
    });
    srcP.forEach((p, j) => {
      const on = hover && hover.col === j;
      ctx.font = font(on);
      ctx.save();
      ctx.translate(left + j * cell + cell / 2, top - 6);
      ctx.rotate(-angle);
      if (on) { ctx.fillStyle = HILITE_BG; ctx.fillRect(-3, -cell / 2, ctx.measureText(p).width + 6, cell); }
      drawPiece(ctx, p, 0, 0, on ? HILITE : TEXT);
      ctx.restore();
    });

    if (hover) {
      ctx.strokeStyle = "rgba(217,119,6,0.55)";
      ctx.strokeRect(left + 0.5, top + hover.row * cell + 0.5, cell * cols - 1, cell - 1);
      ctx.strokeRect(left + hover.col * cell + 0.5, top + 0.5, cell - 1, cell * rows - 1);
      ctx.strokeStyle = "#d97706";
      ctx.lineWidth = 2;
      ctx.strokeRect(left + hover.col * cell + 1, top + hover.row * cell + 1, cell - 2, cell - 2);
    }

    geom = { left, top, cell, rows, cols, m, srcP, tgtP };
    const headText = els.head.value === "avg" ? "average of heads" : `head ${els.head.value}`;
    canvas.setAttribute("aria-label", `Cross-attention heatmap, layer ${els.layer.value}, ${headText}: `
      + `${rows} target pieces by ${cols} source pieces`);
    // The grid's geometry in CSS pixels, for tests that hover a cell.
    Object.assign(canvas.dataset, { rows: String(rows), cols: String(cols), left: String(left), top: String(top),
      cell: String(cell), drawn: "true" });
  }

  const hideTooltip = () => { els.tooltip.hidden = true; };

  function clearHover() {
    hideTooltip();
    if (hover) { hover = null; drawHeatmap(); }
  }

  function onPointer(e) {
    if (!geom) return;
    const r = els.canvas.getBoundingClientRect();
    const col = Math.floor((e.clientX - r.left - geom.left) / geom.cell);
    const row = Math.floor((e.clientY - r.top - geom.top) / geom.cell);
    if (row < 0 || col < 0 || row >= geom.rows || col >= geom.cols) return clearHover();
    if (!hover || hover.row !== row || hover.col !== col) {
      hover = { row, col };
      drawHeatmap();
    }
    const w = (geom.m[row] && geom.m[row][col]) || 0;
    const tip = els.tooltip;
    tip.textContent = `${geom.tgtP[row] ?? row} ← ${geom.srcP[col] ?? col}  ${w.toFixed(3)}`;
    tip.hidden = false;
    const x = Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
    const below = e.clientY + 16 + tip.offsetHeight <= window.innerHeight;
    tip.style.left = `${Math.max(4, x)}px`;
    tip.style.top = `${Math.max(4, below ? e.clientY + 16 : e.clientY - tip.offsetHeight - 10)}px`;
  }

  function updateCounter() {
    const n = els.source.value.length;
    els.counter.textContent = maxChars ? `${num(n)} / ${num(maxChars)}` : "";
    els.counter.classList.toggle("warn", Boolean(maxChars) && n >= maxChars * 0.9);
  }

  // ---- wiring --------------------------------------------------------------
  $("translate-form").addEventListener("submit", (e) => { e.preventDefault(); translate(); });
  $("file-form").addEventListener("submit", (e) => { e.preventDefault(); translateFile(); });
  els.file.addEventListener("change", () => { els.fileStatus.textContent = ""; els.download.hidden = true; });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && e.target !== els.apikey) {
      e.preventDefault();
      translate();
    }
  });
  els.auth.addEventListener("submit", (e) => {
    e.preventDefault();
    const key = els.apikey.value.trim();
    if (!key) return setError("Enter an API key.");
    setKey(key);
    loadModel();
  });
  els.source.addEventListener("input", () => { updateCounter(); if (els.source.value.trim()) setHint(""); });
  els.beam.addEventListener("change", () => {
    const beam = readInt(els.beam, 1, maxBeam, defaultBeam);
    els.nbest.max = String(beam);
    if (Number(els.nbest.value) > beam) els.nbest.value = String(beam);
  });
  els.nbest.addEventListener("change", () => readInt(els.nbest, 1, Number(els.beam.value) || defaultBeam, 1));
  const redraw = () => { hover = null; hideTooltip(); drawHeatmap(); };
  for (const select of [els.layer, els.head]) select.addEventListener("change", redraw);
  els.sentence.addEventListener("change", showSentence);
  for (const type of ["pointermove", "pointerdown"]) els.canvas.addEventListener(type, onPointer);
  els.canvas.addEventListener("pointerleave", clearHover);
  let resizeQueued = false;
  window.addEventListener("resize", () => {
    if (resizeQueued || !attention) return;
    resizeQueued = true;
    requestAnimationFrame(() => { resizeQueued = false; redraw(); });
  });

  if (/Mac|iPhone|iPad/.test(navigator.userAgent)) $("mod-key").textContent = "⌘";
  updateCounter();
  loadModel();
})();
