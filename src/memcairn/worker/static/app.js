// memcairn viewer: a live feed over SSE, hybrid search, a full-record panel and delete.
// Plain ES2020, no build step, no dependencies. Memories are untrusted input: every piece of data is
// rendered with textContent / attributes, never parsed as HTML.
'use strict';

(() => {
  const FEED_LIMIT = 50; // items fetched on load and whenever the filters change
  const FEED_MAX = 300; // the feed keeps at most this many rows; the oldest go first
  const SEARCH_LIMIT = 50;
  const PAGE_MAX = 100; // the worker's largest page; a catch-up after a reconnect asks for several
  const CLOCK_MS = 60000; // time labels ("14:05", "3 Dec 14:05") are redone as the day changes
  const RECONNECT_MS = 5000;
  const RETRY_MS = 2000; // a feed that could not load (worker starting, restarting) is asked for again
  const ROW_TITLE_CHARS = 240; // a title may be 256 KiB; rows and the heading show the start of it
  const HEADING_CHARS = 400;
  // A hit's relevance is on the scale of the CLI's --min-score: 1.0 and over is a match, under it a weak match
  // (search.relevance.STRONG), marked "weak" as `memcairn search` marks it: the hit's own `weak` when it has one.
  const STRONG = 1.0;
  const WEAK_ONLY = 'No strong match: these only resemble the query (weak); memory may not hold the answer.';
  const KNOWN_TYPES = ['discovery', 'bugfix', 'feature', 'refactor', 'change', 'decision', 'summary', 'prompt', 'note'];
  const TEXT_SECTIONS = [
    ['text', 'Text'],
    ['narrative', 'Narrative'],
    ['request', 'Request'],
    ['investigated', 'Investigated'],
    ['learned', 'Learned'],
    ['completed', 'Completed'],
    ['next_steps', 'Next steps'],
    ['notes', 'Notes'],
  ];
  const LIST_SECTIONS = [
    ['facts', 'Facts', 'facts'],
    ['concepts', 'Concepts', 'chips'],
    ['files_read', 'Files read', 'files'],
    ['files_modified', 'Files modified', 'files'],
  ];
  const FALLBACK_WORDS = {
    vector_unavailable: 'semantic index unavailable, keyword only',
    vector_error: 'semantic search failed, keyword only',
    platform_scoped_zero: 'nothing for this platform, widened',
  };

  const $ = (id) => document.getElementById(id);
  const ui = {
    connection: $('connection'),
    workerStatus: $('worker-status'),
    searchForm: $('search-form'),
    searchInput: $('search-input'),
    searchClear: $('search-clear'),
    projectFilter: $('project-filter'),
    kindFilter: $('kind-filter'),
    typeFilter: $('type-filter'),
    resultsSection: $('results-section'),
    searchMeta: $('search-meta'),
    searchNotes: $('search-notes'),
    results: $('results'),
    feed: $('feed'),
    feedMeta: $('feed-meta'),
    feedEmpty: $('feed-empty'),
    detail: $('detail'),
    detailHeading: $('detail-heading'),
    detailPlaceholder: $('detail-placeholder'),
    detailBody: $('detail-body'),
    deleteButton: $('delete-button'),
    detailClose: $('detail-close'),
  };

  const state = {
    feed: new Map(), // id (string) -> item summary
    pending: null, // SSE events seen while the feed loads, replayed on top of the loaded page
    feedError: '',
    feedLoaded: false, // the feed had its first answer: until then it is loading, not empty
    query: '', // the active search, '' = none
    results: [],
    selectedId: null,
    openedFrom: null, // the list (results or feed) whose row opened the detail; Close returns there
    record: null, // the full record shown in the detail panel
    projects: new Map(), // name -> item count (null when unknown)
    merges: new Map(), // project name -> the project it was merged into (its memories answer to both)
    types: new Set(KNOWN_TYPES),
    seq: { feed: 0, search: 0, detail: 0, projects: 0 },
    source: null,
    hadError: false,
    lastStatus: '',
  };

  // ---------------------------------------------------------------- helpers

  function el(tag, options = {}, children = []) {
    const node = document.createElement(tag);
    if (options.className) node.className = options.className;
    if (options.text !== undefined && options.text !== null) node.textContent = String(options.text);
    if (options.attrs) {
      for (const [name, value] of Object.entries(options.attrs)) {
        if (value !== undefined && value !== null && value !== false) node.setAttribute(name, String(value));
      }
    }
    for (const child of children) if (child) node.append(child);
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function str(value) {
    return typeof value === 'string' ? value : value === undefined || value === null ? '' : String(value);
  }

  function epochMs(value) {
    const n = Number(value);
    if (!Number.isFinite(n) || n <= 0) return null;
    return n < 1e11 ? n * 1000 : n; // tolerate seconds
  }

  // Intl formatters keep the time zone they were made in. A machine moved to another zone (a laptop that
  // travels, a changed setting) would show the old zone's times until a reload, so the formatters are made
  // again, and every time on the page rewritten, when the zone changes.
  let clock = null; // { zone, full, time, dayMonth, dayMonthYear }

  function currentZone() {
    return new Intl.DateTimeFormat().resolvedOptions().timeZone;
  }

  function makeClock(zone) {
    return {
      zone,
      // 24-hour times whatever the locale's habit, as the CLI and the SessionStart digest print them
      full: new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short', hourCycle: 'h23' }),
      time: new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }),
      dayMonth: new Intl.DateTimeFormat(undefined, { day: 'numeric', month: 'short' }),
      dayMonthYear: new Intl.DateTimeFormat(undefined, { day: 'numeric', month: 'short', year: 'numeric' }),
    };
  }

  function formats() {
    if (!clock) clock = makeClock(currentZone());
    return clock;
  }

  function zoneChanged() {
    const zone = currentZone();
    if (clock && clock.zone === zone) return false;
    clock = makeClock(zone);
    return true;
  }

  function timeLabel(date, now = new Date()) {
    const f = formats();
    if (date.toDateString() === now.toDateString()) return f.time.format(date);
    if (date.getFullYear() === now.getFullYear()) return `${f.dayMonth.format(date)} ${f.time.format(date)}`;
    return f.dayMonthYear.format(date);
  }

  // A row's time is short ("14:05", "3 Dec 14:05") with the full date as its tooltip; the detail's is full.
  function writeTime(node, date, now = new Date()) {
    const full = formats().full.format(date);
    const text = node.getAttribute('data-style') === 'full' ? full : timeLabel(date, now);
    if (node.textContent !== text) node.textContent = text;
    if (node.getAttribute('data-style') !== 'full' && node.getAttribute('title') !== full) node.setAttribute('title', full);
  }

  function timeElement(ms, style = 'short') {
    if (ms === null) return el('time', { text: '' });
    const date = new Date(ms);
    const node = el('time', { attrs: { datetime: date.toISOString(), 'data-style': style } });
    writeTime(node, date);
    return node;
  }

  function refreshTimeLabels() {
    // Redone every minute and whenever the tab comes back: a tab left open past midnight turns today's
    // "14:05" into "3 Dec 14:05", and a change of time zone shows at the latest then.
    zoneChanged();
    const now = new Date();
    for (const node of document.querySelectorAll('time[datetime][data-style]')) {
      writeTime(node, new Date(node.getAttribute('datetime')), now);
    }
  }

  function followTimeZone() {
    // Before new times are drawn: if the zone changed, the times already shown are rewritten too.
    if (zoneChanged()) refreshTimeLabels();
  }

  function normalize(raw) {
    const source = raw && typeof raw === 'object' ? raw : {};
    return {
      id: str(source.id),
      kind: str(source.kind),
      type: str(source.type),
      title: str(source.title),
      displayTitle: str(source.display_title || source.subtitle),
      project: str(source.project),
      created: epochMs(source.created_at_epoch),
      score: typeof source.score === 'number' ? source.score : null,
      relevance: typeof source.relevance === 'number' ? source.relevance : null,
      weak: typeof source.weak === 'boolean' ? source.weak
        : typeof source.relevance === 'number' && source.relevance < STRONG,
    };
  }

  function titleOf(item) {
    const text = (item.title || item.displayTitle || '').trim();
    return text || `(untitled ${item.kind || 'memory'} #${item.id})`;
  }

  function cut(text, limit) {
    if (text.length <= limit) return text;
    let end = limit - 1;
    if (/[\uD800-\uDBFF]/.test(text[end - 1])) end--; // never keep half of a surrogate pair (an emoji)
    return `${text.slice(0, end).trimEnd()}…`;
  }

  // Paths and commands in a title are long words. Left to overflow-wrap, the browser cuts them wherever the line
  // ends (`src/app.j` + `s\``, or a lone backtick on the last line); a <wbr> after each path separator gives it
  // better places, and the text itself is unchanged.
  function setBreakable(node, text) {
    clear(node);
    for (const part of text.split(/(?<=[/\\.:=&?,])(?=[^/\\.:=&?,\s])/)) {
      if (node.lastChild) node.append(document.createElement('wbr'));
      node.append(document.createTextNode(part));
    }
  }

  // `inline code` in stored text becomes a <code> element; the text goes in as text nodes, never as markup. A
  // backtick without its pair (a title cut short) stays as it is.
  function withCode(node, text) {
    const parts = text.split(/`([^`\n]+)`/);
    parts.forEach((part, i) => {
      if (i % 2 === 1) node.append(el('code', { text: part }));
      else if (part) node.append(document.createTextNode(part));
    });
    return node;
  }

  function firstText(record) {
    for (const field of ['subtitle', 'request', 'text', 'narrative', 'completed', 'learned', 'investigated',
      'next_steps', 'notes']) {
      const line = str(record[field]).replace(/\s+/g, ' ').trim();
      if (line) return line.slice(0, HEADING_CHARS + 1);
    }
    return '';
  }

  function compareNewest(a, b) {
    return (b.created || 0) - (a.created || 0) || Number(b.id) - Number(a.id) || (a.id < b.id ? 1 : -1);
  }

  class HttpError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function readError(response) {
    let detail = '';
    try {
      const text = await response.text();
      try {
        const data = JSON.parse(text);
        detail = str(data.detail || data.message || data.error || '');
      } catch (_) {
        detail = text.slice(0, 200);
      }
    } catch (_) {
      detail = '';
    }
    return new HttpError(response.status, `${response.status} ${response.statusText}${detail ? `: ${detail}` : ''}`);
  }

  async function getJSON(url) {
    const response = await fetch(url, { headers: { Accept: 'application/json' }, cache: 'no-store' });
    if (!response.ok) throw await readError(response);
    return response.json();
  }

  function parseEventData(event) {
    try {
      return JSON.parse(event.data);
    } catch (_) {
      return event.data;
    }
  }

  function filters() {
    return {
      project: ui.projectFilter.value,
      kind: ui.kindFilter.value,
      type: ui.typeFilter.value,
    };
  }

  function inProject(item, wanted) {
    // A filter on a project includes the projects merged into it, also transitively (as the worker does).
    let name = item.project;
    for (let hops = 0; name && hops < 32; hops++) {
      if (name === wanted) return true;
      name = state.merges.get(name);
    }
    return false;
  }

  function matches(item, f = filters()) {
    return (!f.project || inProject(item, f.project)) && (!f.kind || item.kind === f.kind) && (!f.type || item.type === f.type);
  }

  function filterParams(params) {
    const f = filters();
    for (const [name, value] of Object.entries(f)) if (value) params.set(name, value);
    return params;
  }

  // ---------------------------------------------------------------- rows

  function buildRow(item, { showScore = false } = {}) {
    const kindBadge = el('span', { className: `badge kind-${item.kind || 'unknown'}`, text: item.kind || 'memory' });
    const top = el('span', { className: 'row-top' }, [
      kindBadge,
      item.type && item.type !== item.kind ? el('span', { className: 'row-type', text: item.type }) : null,
      item.project ? el('span', { className: 'row-project', text: item.project }) : null,
      showScore && item.relevance !== null ? el('span', { className: 'row-score', text: `relevance ${item.relevance.toFixed(2)}` }) : null,
      showScore && item.weak ? el('span', { className: 'row-weak', text: 'weak' }) : null,
      timeElement(item.created),
    ]);
    const title = withCode(el('span', { className: 'row-title', attrs: { dir: 'auto' } }), cut(titleOf(item), ROW_TITLE_CHARS));
    const button = el('button', { className: 'row-button', attrs: { type: 'button' } }, [top, title]);
    const row = el('li', {
      className: 'row',
      attrs: { 'data-item-id': item.id, 'data-kind': item.kind, 'data-type': item.type, 'data-project': item.project },
    }, [button]);
    if (item.id === state.selectedId) markRow(row, true);
    return row;
  }

  function markRow(row, selected) {
    row.classList.toggle('selected', selected);
    const button = row.querySelector('.row-button');
    if (button) {
      if (selected) button.setAttribute('aria-current', 'true');
      else button.removeAttribute('aria-current');
    }
  }

  function markSelection() {
    for (const row of document.querySelectorAll('.rows [data-item-id]')) {
      markRow(row, row.getAttribute('data-item-id') === state.selectedId);
    }
  }

  function rowsFor(id) {
    return Array.from(document.querySelectorAll('.rows [data-item-id]')).filter(
      (row) => row.getAttribute('data-item-id') === id,
    );
  }

  function focusedRowId() {
    const active = document.activeElement;
    const row = active && active.closest ? active.closest('[data-item-id]') : null;
    return row && row.parentElement === ui.feed ? row.getAttribute('data-item-id') : null;
  }

  // ---------------------------------------------------------------- feed

  function trimFeed() {
    if (state.feed.size <= FEED_MAX) return;
    // Rows the filters hide go first: a filtered tab keeps its own memories however busy other projects are.
    const f = filters();
    const sorted = Array.from(state.feed.values()).sort((a, b) => matches(b, f) - matches(a, f) || compareNewest(a, b));
    for (const item of sorted.slice(FEED_MAX)) {
      state.feed.delete(item.id);
      const row = feedRow(item.id);
      if (row) row.remove();
    }
  }

  function feedRow(id) {
    for (const row of ui.feed.children) if (row.getAttribute('data-item-id') === id) return row;
    return null;
  }

  function renderFeed() {
    followTimeZone();
    const keepFocus = focusedRowId();
    const f = filters();
    const fragment = document.createDocumentFragment();
    for (const item of Array.from(state.feed.values()).sort(compareNewest)) {
      const row = buildRow(item);
      row.hidden = !matches(item, f);
      fragment.append(row);
    }
    clear(ui.feed);
    ui.feed.append(fragment);
    if (keepFocus) {
      const row = feedRow(keepFocus);
      if (row && !row.hidden) row.querySelector('.row-button').focus();
    }
    updateFeedMeta();
  }

  function applyFeedFilter() {
    const f = filters();
    for (const row of ui.feed.children) {
      const item = state.feed.get(row.getAttribute('data-item-id'));
      row.hidden = !item || !matches(item, f);
    }
    updateFeedMeta();
  }

  function updateFeedMeta() {
    const total = ui.feed.children.length;
    const shown = Array.from(ui.feed.children).filter((row) => !row.hidden).length;
    if (state.feedError) {
      ui.feedMeta.textContent = state.feedError;
      ui.feedMeta.classList.add('error');
    } else {
      ui.feedMeta.classList.remove('error');
      ui.feedMeta.textContent = shown === total ? `${total} shown` : `${shown} of ${total} shown`;
    }
    if (!state.feedLoaded && !state.feedError) {
      ui.feedMeta.textContent = 'Loading…';
      ui.feedEmpty.textContent = 'Connecting to the worker…';
      ui.feedEmpty.hidden = shown > 0;
      return;
    }
    ui.feedEmpty.hidden = shown > 0 || Boolean(state.feedError);
    if (total > 0 && shown === 0) ui.feedEmpty.textContent = 'Nothing in the feed matches these filters.';
    else ui.feedEmpty.textContent = 'No memories yet. New ones appear here as they are saved.';
  }

  function insertFeedItem(item) {
    followTimeZone();
    const existing = feedRow(item.id);
    if (existing) existing.remove();
    state.feed.set(item.id, item);
    const row = buildRow(item);
    row.hidden = !matches(item);
    row.classList.add('fresh');
    let before = null;
    for (const other of ui.feed.children) {
      const otherItem = state.feed.get(other.getAttribute('data-item-id'));
      if (otherItem && compareNewest(item, otherItem) < 0) {
        before = other;
        break;
      }
    }
    ui.feed.insertBefore(row, before);
    trimFeed();
    updateFeedMeta();
  }

  let feedRetryTimer = null;

  function retryLater(error, oldest) {
    clearTimeout(feedRetryTimer);
    if (error.status !== undefined && error.status < 500) return; // a request the worker refuses stays refused
    feedRetryTimer = setTimeout(() => {
      loadFeed(oldest);
      loadProjects();
    }, RETRY_MS);
  }

  async function fetchFeed(oldest) {
    // The newest FEED_LIMIT items; given the oldest item the feed showed (a catch-up after a reconnect), on
    // down to it, so the feed loses nothing it had (at most FEED_MAX items).
    const items = [];
    let limit = FEED_LIMIT;
    while (items.length < FEED_MAX) {
      const params = filterParams(new URLSearchParams({ limit: String(limit), offset: String(items.length), format: 'json' }));
      const page = resultsOf(await getJSON(`/api/search?${params}`));
      items.push(...page);
      if (page.length < limit || !oldest || compareNewest(normalize(page[page.length - 1]), oldest) >= 0) break;
      limit = Math.min(PAGE_MAX, FEED_MAX - items.length);
    }
    return items;
  }

  async function loadFeed(oldest = null) {
    const seq = ++state.seq.feed;
    clearTimeout(feedRetryTimer);
    state.pending = [];
    ui.feed.setAttribute('aria-busy', 'true');
    let data;
    try {
      data = await fetchFeed(oldest);
    } catch (error) {
      if (seq !== state.seq.feed) return;
      state.pending = null;
      ui.feed.removeAttribute('aria-busy');
      state.feedError = `Could not load the feed (${error.message}).`;
      updateFeedMeta();
      retryLater(error, oldest);
      return;
    }
    if (seq !== state.seq.feed) return;
    const fresh = new Map();
    for (const raw of data) {
      const item = normalize(raw);
      if (item.id) fresh.set(item.id, item);
      noteItem(item);
    }
    for (const [type, item] of state.pending) {
      if (type === 'added') fresh.set(item.id, item);
      else fresh.delete(item.id);
    }
    state.pending = null;
    state.feedError = '';
    state.feedLoaded = true;
    state.feed = fresh;
    renderFeed();
    ui.feed.removeAttribute('aria-busy');
  }

  function resultsOf(data) {
    if (Array.isArray(data)) return data;
    if (data && Array.isArray(data.results)) return data.results;
    if (data && Array.isArray(data.hits)) return data.hits;
    if (data && Array.isArray(data.items)) return data.items;
    return [];
  }

  // ---------------------------------------------------------------- filters

  function setOptions(select, entries, allLabel) {
    const current = select.value;
    clear(select);
    select.append(el('option', { text: allLabel, attrs: { value: '' } }));
    let found = current === '';
    for (const [value, label] of entries) {
      select.append(el('option', { text: label, attrs: { value } }));
      if (value === current) found = true;
    }
    if (!found) select.append(el('option', { text: current, attrs: { value: current } }));
    select.value = current;
  }

  function renderProjectOptions() {
    const names = Array.from(state.projects.keys()).sort((a, b) => a.localeCompare(b));
    setOptions(
      ui.projectFilter,
      names.map((name) => {
        const count = state.projects.get(name);
        return [name, count === null || count === undefined ? name : `${name} (${count})`];
      }),
      'All projects',
    );
  }

  function renderTypeOptions() {
    const extra = Array.from(state.types).filter((t) => !KNOWN_TYPES.includes(t)).sort();
    setOptions(
      ui.typeFilter,
      [...KNOWN_TYPES, ...extra].map((t) => [t, t]),
      'All types',
    );
  }

  function noteItem(item) {
    if (item.project && !state.projects.has(item.project)) {
      state.projects.set(item.project, null);
      renderProjectOptions();
    }
    if (item.type && !state.types.has(item.type)) {
      state.types.add(item.type);
      renderTypeOptions();
    }
  }

  async function loadProjects() {
    const seq = ++state.seq.projects;
    let data;
    try {
      data = await getJSON('/api/projects');
    } catch (_) {
      return; // the filter still fills from the items the page sees
    }
    if (seq !== state.seq.projects) return;
    const list = Array.isArray(data) ? data : data && Array.isArray(data.projects) ? data.projects : [];
    for (const entry of list) {
      if (typeof entry === 'string') {
        if (!state.projects.has(entry)) state.projects.set(entry, null);
      } else if (entry && typeof entry === 'object') {
        const name = str(entry.name || entry.project);
        if (!name) continue;
        if (entry.merged_into_project) state.merges.set(name, str(entry.merged_into_project));
        else state.merges.delete(name);
        const count = entry.items ?? entry.count ?? entry.total;
        if (count === 0 && name !== ui.projectFilter.value) {
          // named by a session that stored nothing (a SessionStart in a folder without memories): no choice
          state.projects.delete(name);
          continue;
        }
        state.projects.set(name, typeof count === 'number' ? count : null);
      }
    }
    renderProjectOptions();
    applyFeedFilter();
  }

  let projectsTimer = null;

  function refreshProjectsSoon() {
    clearTimeout(projectsTimer);
    projectsTimer = setTimeout(loadProjects, 1000);
  }

  function onFilterChange() {
    // A memory the filters now leave out is no longer shown beside the lists.
    if (state.selectedId !== null && state.record && !matches(recordItem(state.record, state.selectedId))) closeDetail();
    applyFeedFilter();
    loadFeed();
    if (state.query) runSearch(state.query);
  }

  // ---------------------------------------------------------------- search

  async function runSearch(query) {
    const seq = ++state.seq.search;
    state.query = query;
    ui.resultsSection.hidden = false;
    ui.searchClear.hidden = false;
    ui.results.setAttribute('aria-busy', 'true');
    setSearchMeta([el('span', { text: 'Searching…' })]);
    const params = filterParams(new URLSearchParams({ query, format: 'json', limit: String(SEARCH_LIMIT) }));
    let data;
    try {
      data = await getJSON(`/api/search?${params}`);
    } catch (error) {
      if (seq !== state.seq.search) return;
      ui.results.removeAttribute('aria-busy');
      clear(ui.results);
      ui.searchNotes.hidden = true;
      setSearchMeta([el('span', { className: 'error', text: `Search failed: ${error.message}` })]);
      return;
    }
    if (seq !== state.seq.search) return;
    ui.results.removeAttribute('aria-busy');
    state.results = resultsOf(data).map(normalize).filter((item) => item.id);
    state.results.forEach(noteItem);

    const count = state.results.length;
    const parts = [el('span', { text: `${count} ${count === 1 ? 'result' : 'results'}` })];
    if (data && data.strategy) {
      parts.push(el('span', { className: 'strategy', attrs: { 'data-strategy': str(data.strategy) } }, [
        document.createTextNode('strategy: '),
        el('strong', { text: str(data.strategy) }),
      ]));
    }
    if (data && data.fallback_reason) {
      const reason = str(data.fallback_reason);
      parts.push(el('span', {
        className: 'fallback',
        text: `fallback: ${reason}${FALLBACK_WORDS[reason] ? ` (${FALLBACK_WORDS[reason]})` : ''}`,
      }));
    }
    if (data && typeof data.latency_ms === 'number') parts.push(el('span', { text: `${Math.round(data.latency_ms)} ms` }));
    setSearchMeta(parts);

    const notes = data && Array.isArray(data.notes) ? data.notes.map(str).filter(Boolean) : [];
    // as `memcairn search` says it: every hit weak, or weaker candidates hidden under the relevance floor
    if (count > 0 && state.results.every((item) => item.weak)) notes.unshift(WEAK_ONLY);
    ui.searchNotes.textContent = notes.join(' ');
    ui.searchNotes.hidden = notes.length === 0;

    // A search run again (filters changed, the stream reconnected) keeps the focus on the result it was on.
    const active = document.activeElement;
    const focusedRow = active && ui.results.contains(active) ? active.closest('[data-item-id]') : null;
    const keepFocus = focusedRow ? focusedRow.getAttribute('data-item-id') : null;
    followTimeZone();
    clear(ui.results);
    if (count === 0) {
      const hidden = data && typeof data.hidden === 'number' ? data.hidden : 0;
      const text = hidden > 0
        ? `No memory matches the query; ${hidden} weaker ${hidden === 1 ? 'match' : 'matches'} hidden.`
        : 'No memories matched.';
      ui.results.append(el('li', { className: 'empty', text }));
      return;
    }
    const fragment = document.createDocumentFragment();
    for (const item of state.results) fragment.append(buildRow(item, { showScore: true }));
    ui.results.append(fragment);
    if (keepFocus) {
      const row = Array.from(ui.results.children).find((other) => other.getAttribute('data-item-id') === keepFocus);
      if (row) row.querySelector('.row-button').focus();
    }
  }

  function setSearchMeta(parts) {
    clear(ui.searchMeta);
    parts.forEach((part, i) => {
      if (i > 0) ui.searchMeta.append(el('span', { className: 'sep', text: ' · ', attrs: { 'aria-hidden': 'true' } }));
      ui.searchMeta.append(part);
    });
  }

  function clearSearch() {
    state.seq.search++;
    state.query = '';
    state.results = [];
    clear(ui.results);
    clear(ui.searchMeta);
    ui.searchNotes.hidden = true;
    ui.resultsSection.hidden = true;
    ui.searchClear.hidden = true;
  }

  // ---------------------------------------------------------------- detail

  function showPlaceholder(message) {
    state.record = null;
    ui.detailHeading.textContent = 'Memory';
    ui.detailBody.hidden = true;
    clear(ui.detailBody);
    ui.detailPlaceholder.textContent = message;
    ui.detailPlaceholder.hidden = false;
    ui.deleteButton.hidden = true;
    ui.detailClose.hidden = state.selectedId === null;
    ui.detail.classList.toggle('open', state.selectedId !== null);
  }

  function closeDetail() {
    state.seq.detail++;
    state.selectedId = null;
    markSelection();
    showPlaceholder('Select a memory to see its full record.');
  }

  // A team server's memory (remote mode) is `team#12`: read through the worker's team route, never deleted here.
  function isTeamId(id) {
    return String(id).startsWith('team#');
  }

  function memoryPath(id) {
    const text = String(id);
    return isTeamId(text) ? `/api/memory/team/${encodeURIComponent(text.slice(5))}` : `/api/memory/${encodeURIComponent(text)}`;
  }

  async function openDetail(id, { focus = false } = {}) {
    const seq = ++state.seq.detail;
    state.selectedId = id;
    markSelection();
    showPlaceholder(`Loading memory #${id}…`);
    let data;
    try {
      data = await getJSON(memoryPath(id));
    } catch (error) {
      if (seq !== state.seq.detail) return;
      if (error.status === 404) {
        removeItem(id);
        showPlaceholder(`Memory #${id} no longer exists.`);
      } else {
        showPlaceholder(`Could not load memory #${id} (${error.message}).`);
      }
      return;
    }
    if (seq !== state.seq.detail) return;
    const record = data && typeof data === 'object' && !('id' in data) && data.item ? data.item : data;
    renderDetail(record && typeof record === 'object' ? record : {}, id);
    if (focus || window.matchMedia('(max-width: 900px)').matches) {
      ui.detail.scrollIntoView({ block: 'start', behavior: 'smooth' });
      ui.detailHeading.focus({ preventScroll: true });
    }
  }

  function recordItem(record, id) {
    return normalize({ display_title: firstText(record), ...record, id: record.id ?? id });
  }

  function renderDetail(record, id) {
    followTimeZone();
    state.record = record;
    const item = recordItem(record, id);
    noteItem(item);
    const heading = titleOf(item);
    setBreakable(ui.detailHeading, cut(heading, HEADING_CHARS));
    clear(ui.detailBody);

    const meta = el('dl', { className: 'record-meta' });
    const addMeta = (label, value) => {
      if (value === null || value === undefined || value === '') return;
      meta.append(el('div', {}, [el('dt', { text: label }), el('dd', {}, [value instanceof Node ? value : document.createTextNode(str(value))])]));
    };
    addMeta('ID', `#${item.id}`);
    addMeta('Kind', item.kind);
    addMeta('Type', item.type);
    addMeta('Project', item.project);
    if (record.merged_into_project) addMeta('Merged into', record.merged_into_project);
    if (item.created !== null) addMeta('Created', timeElement(item.created, 'full'));
    const updated = epochMs(record.updated_at_epoch);
    if (updated !== null && item.created !== null && Math.abs(updated - item.created) > 1000) {
      addMeta('Updated', timeElement(updated, 'full'));
    }
    addMeta('Platform', record.platform_source);
    addMeta('Session', record.session);
    if (record.prompt_number !== null && record.prompt_number !== undefined) addMeta('Prompt', record.prompt_number);
    ui.detailBody.append(meta);

    if (str(record.subtitle).trim()) ui.detailBody.append(withCode(el('p', { className: 'subtitle', attrs: { dir: 'auto' } }), str(record.subtitle)));

    let sections = 0;
    if (heading.length > HEADING_CHARS && heading === item.title.trim()) {
      ui.detailBody.append(el('section', { className: 'record-section', attrs: { 'data-field': 'title' } }, [
        el('h3', { text: 'Title' }),
        el('div', { className: 'prose', text: heading, attrs: { dir: 'auto' } }),
      ]));
    }
    for (const [field, label] of TEXT_SECTIONS) {
      const value = str(record[field]).trim();
      if (!value) continue;
      sections++;
      ui.detailBody.append(el('section', { className: 'record-section', attrs: { 'data-field': field } }, [
        el('h3', { text: label }),
        withCode(el('div', { className: 'prose', attrs: { dir: 'auto' } }), value),
      ]));
    }
    for (const [field, label, style] of LIST_SECTIONS) {
      const values = Array.isArray(record[field]) ? record[field].map(str).filter((v) => v.trim()) : [];
      if (values.length === 0) continue;
      sections++;
      const list = el('ul', { className: `list-${style}` });
      for (const value of values) {
        const entry = el('li', { attrs: { dir: 'auto' } });
        if (style === 'files') entry.append(el('code', { text: value }));
        else if (style === 'facts') withCode(entry, value);
        else entry.append(document.createTextNode(value));
        list.append(entry);
      }
      ui.detailBody.append(el('section', { className: 'record-section', attrs: { 'data-field': field } }, [
        el('h3', { text: label }),
        list,
      ]));
    }
    if (sections === 0) ui.detailBody.append(el('p', { className: 'empty', text: 'This memory has no text.' }));

    const raw = el('details', { className: 'raw' }, [
      el('summary', { text: 'Raw record (JSON)' }),
      el('pre', { text: JSON.stringify(record, null, 2) }),
    ]);
    ui.detailBody.append(raw);

    ui.detailPlaceholder.hidden = true;
    ui.detailBody.hidden = false;
    ui.deleteButton.hidden = isTeamId(state.selectedId); // a team memory is forgotten on the team server
    ui.deleteButton.disabled = false;
    ui.detailClose.hidden = false;
    ui.detail.classList.add('open');
  }

  // ---------------------------------------------------------------- delete

  function removeItem(id) {
    state.feed.delete(id);
    state.results = state.results.filter((item) => item.id !== id);
    const nextFocus = focusTargetAfter(id);
    // Focus in the panel of the memory going away (its Delete button) moves on with the rows, whichever of
    // the DELETE answer and the stream's item_deleted arrives first.
    let hadFocus = state.selectedId === id && ui.detail.contains(document.activeElement);
    for (const row of rowsFor(id)) {
      if (row.contains(document.activeElement)) hadFocus = true;
      row.remove();
    }
    if (hadFocus && nextFocus) nextFocus.focus();
    updateFeedMeta();
    if (state.query && ui.results.children.length === 0) {
      ui.results.append(el('li', { className: 'empty', text: 'No memories matched.' }));
    }
    if (state.selectedId === id) {
      state.selectedId = null;
      showPlaceholder(`Memory #${id} was deleted.`);
    }
  }

  function shownSibling(row, direction) {
    let sibling = row[direction];
    while (sibling && (sibling.hidden || !sibling.querySelector('.row-button'))) sibling = sibling[direction];
    return sibling;
  }

  function focusTargetAfter(id) {
    // The shown row below the one going away, else the one above it, else the search box.
    for (const row of rowsFor(id)) {
      const sibling = shownSibling(row, 'nextElementSibling') || shownSibling(row, 'previousElementSibling');
      if (sibling) return sibling.querySelector('.row-button');
    }
    return ui.searchInput;
  }

  async function deleteSelected() {
    const record = state.record;
    const id = state.selectedId;
    if (!record || id === null) return;
    const title = cut(titleOf(recordItem(record, id)), ROW_TITLE_CHARS);
    // The title stands on a line of its own, which is a paragraph of its own to the bidi algorithm: a
    // right-to-left title cannot reorder the rest of the message, and no invisible direction mark (FSI, PDI)
    // is put in a text a person may copy.
    if (!window.confirm(`Delete memory #${id}?\n\n${title}\n\nThis cannot be undone.`)) return;
    // Disabling the button takes the focus from it; note where it goes next before any row can vanish.
    const hadFocus = document.activeElement === ui.deleteButton;
    const next = focusTargetAfter(id);
    ui.deleteButton.disabled = true;
    let response;
    try {
      response = await fetch(`/api/memory/${encodeURIComponent(id)}`, { method: 'DELETE', headers: { Accept: 'application/json' } });
      if (!response.ok && response.status !== 404) throw await readError(response);
    } catch (error) {
      ui.deleteButton.disabled = false;
      if (hadFocus && !ui.deleteButton.hidden) ui.deleteButton.focus();
      showStatusMessage(`Could not delete #${id}: ${error.message}`, true);
      return;
    }
    removeItem(id);
    if (hadFocus && (!document.activeElement || document.activeElement === document.body)) {
      (next.isConnected ? next : ui.searchInput).focus();
    }
    showStatusMessage(`Deleted memory #${id}.`);
    refreshProjectsSoon();
  }

  // ---------------------------------------------------------------- status and SSE

  let messageTimer = null;

  function showStatusMessage(text, isError = false) {
    ui.workerStatus.textContent = text;
    ui.workerStatus.classList.toggle('error', isError);
    clearTimeout(messageTimer);
    messageTimer = setTimeout(() => {
      if (ui.workerStatus.textContent === text) ui.workerStatus.textContent = state.lastStatus || '';
      ui.workerStatus.classList.remove('error');
    }, 6000);
  }

  function describeStatus(data) {
    if (typeof data === 'string') return data;
    if (!data || typeof data !== 'object') return '';
    if (typeof data.message === 'string') return data.message;
    if (typeof data.state === 'string') {
      const phase = data.state.replace(/_/g, ' ');
      const detail = typeof data.detail === 'string' ? data.detail.trim() : '';
      return `Worker ${phase}${detail && detail.toLowerCase() !== phase.toLowerCase() ? `: ${detail}` : ''}`;
    }
    const parts = [];
    for (const [key, value] of Object.entries(data)) {
      if (value === null || typeof value === 'object') continue;
      parts.push(`${key.replace(/_/g, ' ')}: ${value}`);
      if (parts.length >= 6) break;
    }
    return parts.join(' · ');
  }

  function setConnection(kind, text) {
    ui.connection.setAttribute('data-state', kind);
    ui.connection.textContent = text;
  }

  function onItemAdded(data) {
    const item = normalize(data);
    if (!item.id) return;
    noteItem(item);
    if (state.pending) state.pending.push(['added', item]);
    const hadFocus = focusedRowId() === item.id;  // an item the page shows already (loaded as the stream told it)
    insertFeedItem(item);
    if (hadFocus) feedRow(item.id).querySelector('.row-button').focus();
    refreshProjectsSoon();
  }

  function onItemUpdated(data) {
    const item = normalize(data);
    if (!item.id) return;
    noteItem(item);
    if (state.pending) state.pending.push(['added', item]);
    if (state.feed.has(item.id)) {
      const hadFocus = focusedRowId() === item.id;
      insertFeedItem(item);
      if (hadFocus) feedRow(item.id).querySelector('.row-button').focus();
    }
    const index = state.results.findIndex((other) => other.id === item.id);
    if (index >= 0) {
      const updated = { ...item, score: state.results[index].score };
      state.results[index] = updated;
      for (const row of ui.results.children) {
        if (row.getAttribute('data-item-id') === item.id) row.replaceWith(buildRow(updated, { showScore: true }));
      }
    }
    if (state.selectedId === item.id && state.record) openDetail(item.id);
  }

  function onItemDeleted(data) {
    const id = str(data && typeof data === 'object' ? data.id : data);
    if (!id) return;
    if (state.pending) state.pending.push(['deleted', { id }]);
    removeItem(id);
    refreshProjectsSoon();
  }

  function connect() {
    if (!('EventSource' in window)) {
      setConnection('closed', 'Live updates unsupported in this browser');
      return;
    }
    const source = new EventSource('/stream');
    state.source = source;
    source.addEventListener('open', () => {
      setConnection('live', 'Live');
      if (state.hadError) {
        state.hadError = false;
        // Catch up on what was missed while disconnected, as far down as the feed reached.
        const f = filters();
        const shown = Array.from(state.feed.values()).filter((item) => matches(item, f)).sort(compareNewest);
        loadFeed(shown[shown.length - 1] || null);
        loadProjects();
        // Results shown before the drop may be stale (memories saved or deleted meanwhile): search again.
        if (state.query) runSearch(state.query);
      }
    });
    source.addEventListener('error', () => {
      state.hadError = true;
      if (source.readyState === EventSource.CLOSED) {
        setConnection('closed', 'Disconnected; retrying…');
        source.close();
        if (state.source === source) setTimeout(connect, RECONNECT_MS);
      } else {
        setConnection('reconnecting', 'Reconnecting…');
      }
    });
    source.addEventListener('item_added', (event) => onItemAdded(parseEventData(event)));
    source.addEventListener('item_updated', (event) => onItemUpdated(parseEventData(event)));
    source.addEventListener('item_deleted', (event) => onItemDeleted(parseEventData(event)));
    source.addEventListener('status', (event) => {
      state.lastStatus = describeStatus(parseEventData(event));
      ui.workerStatus.classList.remove('error');
      ui.workerStatus.textContent = state.lastStatus;
    });
  }

  // ---------------------------------------------------------------- events

  function onRowActivate(event) {
    const row = event.target.closest('[data-item-id]');
    if (!row) return;
    state.openedFrom = row.parentElement;
    openDetail(row.getAttribute('data-item-id'), { focus: event.detail === 0 });
  }

  function onRowKeydown(event) {
    if (event.key !== 'ArrowDown' && event.key !== 'ArrowUp') return;
    const row = event.target.closest('[data-item-id]');
    if (!row) return;
    let sibling = event.key === 'ArrowDown' ? row.nextElementSibling : row.previousElementSibling;
    while (sibling && sibling.hidden) sibling = event.key === 'ArrowDown' ? sibling.nextElementSibling : sibling.previousElementSibling;
    const button = sibling && sibling.querySelector('.row-button');
    if (button) {
      event.preventDefault();
      button.focus();
    }
  }

  ui.searchForm.addEventListener('submit', (event) => {
    event.preventDefault();
    const query = ui.searchInput.value.trim();
    if (query) runSearch(query);
    else clearSearch();
  });
  ui.searchInput.addEventListener('input', () => {
    if (!ui.searchInput.value.trim() && state.query) clearSearch();
  });
  ui.searchClear.addEventListener('click', () => {
    ui.searchInput.value = '';
    clearSearch();
    ui.searchInput.focus();
  });
  for (const select of [ui.projectFilter, ui.kindFilter, ui.typeFilter]) select.addEventListener('change', onFilterChange);
  for (const list of [ui.feed, ui.results]) {
    list.addEventListener('click', onRowActivate);
    list.addEventListener('keydown', onRowKeydown);
  }
  ui.deleteButton.addEventListener('click', deleteSelected);
  ui.detailClose.addEventListener('click', () => {
    const id = state.selectedId;
    closeDetail();
    const lists = [state.openedFrom, ui.feed].filter((list) => list && list.isConnected);
    const row = id && lists.flatMap((list) => Array.from(list.children)).find(
      (other) => other.getAttribute('data-item-id') === id && !other.hidden && !other.closest('[hidden]'),
    );
    if (row) row.querySelector('.row-button').focus();
    else ui.searchInput.focus();
  });
  document.addEventListener('keydown', (event) => {
    if (event.key === 'Escape' && state.selectedId !== null && ui.detail.contains(document.activeElement)) {
      ui.detailClose.click();
    }
  });
  window.addEventListener('pagehide', () => {
    if (state.source) state.source.close();
    state.source = null;
  });
  window.addEventListener('pageshow', (event) => {
    if (!event.persisted || state.source) return;
    // Back from the browser's page cache: the stream was closed on the way out, so open it and catch up.
    state.hadError = true;
    setConnection('connecting', 'Connecting…');
    connect();
  });

  setInterval(refreshTimeLabels, CLOCK_MS);
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible') refreshTimeLabels();
  });
  window.addEventListener('focus', refreshTimeLabels);
  renderTypeOptions();
  connect();
  loadProjects();
  loadFeed();
})();
