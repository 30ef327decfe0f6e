// The sluice dashboard's script: asks for the viewer token once, then reads the gateway's
// viewer routes every second and draws what they say. Plain DOM, no framework; every value from
// the gateway is set as text (never as markup), since runner ids and model names come from runners.
'use strict';
(() => {
  /** Where the token is kept: this tab's session storage, gone when the tab closes. */
  const TOKEN_KEY = 'sluice.dashboard.operatorToken';
  const POLL_MS = 1000;
  /** Readings of calls per second kept for the chart (about two minutes). */
  const RATE_READINGS = 120;

  const $ = (id) => document.getElementById(id);
  const rates = [];
  let timer;
  let shown = '';
  /** Bumped at each start and stop, so that a read still in flight from before draws nothing. */
  let run = 0;

  function token() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || '';
    } catch {
      return '';
    }
  }

  function setStatus(text) {
    // Only changes are written, so that a screen reader hears a change, not a tick a second.
    if (text !== shown) $('status').textContent = shown = text;
  }

  function showLogin(message) {
    run++;
    clearTimeout(timer);
    $('panels').hidden = true;
    $('forget').hidden = true;
    $('login').hidden = false;
    $('login-error').textContent = message || '';
    $('updated').textContent = '';
    setStatus('Waiting for the viewer token.');
    $('token').focus();
  }

  function showPanels() {
    $('login').hidden = true;
    $('panels').hidden = false;
    $('forget').hidden = false;
  }

  class Refused extends Error {}

  /** GETs a gateway route (relative to this page) with the token; 404 reads as null. */
  async function read(path) {
    const res = await fetch(path, {
      headers: { authorization: `Bearer ${token()}`, accept: 'application/json' },
      cache: 'no-store',
    });
    if (res.status === 401 || res.status === 403)
      throw new Refused(`the gateway refused the token on ${path} (${res.status})`);
    if (res.status === 404) return null;
    if (!res.ok) throw new Error(`${path} answered ${res.status}`);
    return res.json();
  }

  // ---- the tables' frames ----

  /**
   * Each table's column headings, by table id (a heading with a hint is [heading, hint]), and the
   * name of the region it scrolls in where that is not its section's heading. The page holds the
   * tables bare; {@link frameTables} writes their headers and bodies from this list once, so a
   * row's cells and its headings are read side by side here.
   */
  const TABLES = {
    runners: { columns: ['Runner', 'State', 'Health', 'Breaker', 'Ready', 'Load', 'Models', 'Heartbeat', 'Engine'] },
    outcomes: { columns: ['Outcome', 'Calls'], region: 'Calls by outcome' },
    errors: { columns: ['Code', 'Calls'], region: 'Errors by code' },
    queue: { columns: ['Model', 'Priority', 'Waiting', 'Oldest wait'] },
    cache: {
      columns: ['Runner', 'Feed', 'Last update', 'Blocks', 'Model', 'Calls', 'Predicted', 'Reported', 'Over', 'Under'],
    },
    detached: { columns: ['Status', 'Calls'] },
    batches: { columns: ['Status or lines', 'Count'] },
    deployments: {
      columns: [
        'Model',
        'Wanted',
        'Starting',
        'Ready',
        'Draining',
        ['Outdated', 'replicas of an older revision, being replaced'],
        'Reconciler',
      ],
    },
  };

  /**
   * Gives every table of {@link TABLES} its header row and an empty body, inside a region that
   * scrolls sideways on a narrow screen and takes the keyboard focus to do so.
   */
  function frameTables() {
    for (const [id, { columns, region }] of Object.entries(TABLES)) {
      const table = $(id);
      const row = document.createElement('tr');
      for (const column of columns) {
        const [heading, hint] = Array.isArray(column) ? column : [column];
        const th = document.createElement('th');
        th.scope = 'col';
        th.textContent = heading;
        if (hint) th.title = hint;
        row.append(th);
      }
      table.createTHead().append(row);
      table.createTBody();
      const scroll = document.createElement('div');
      scroll.className = 'scroll';
      scroll.tabIndex = 0;
      scroll.setAttribute('role', 'region');
      if (region) scroll.setAttribute('aria-label', region);
      else scroll.setAttribute('aria-labelledby', table.closest('section').getAttribute('aria-labelledby'));
      table.replaceWith(scroll);
      scroll.append(table);
    }
  }

  // ---- drawing helpers ----

  function cell(text, className) {
    const td = document.createElement('td');
    td.textContent = text === undefined || text === null || text === '' ? '—' : String(text);
    if (className) td.className = className;
    return td;
  }

  function stateCell(value) {
    const td = cell(value, 'state');
    if (value !== undefined && value !== null) td.classList.add(`state-${String(value).replace(/[^a-z-]/gi, '')}`);
    return td;
  }

  /**
   * Writes `rows` (arrays of cells) into the body of table `id`, or one row saying `emptyText`
   * when there are none; returns that body.
   */
  function fill(id, rows, emptyText) {
    const table = $(id);
    const out = rows.map((cells) => {
      const tr = document.createElement('tr');
      tr.append(...cells);
      return tr;
    });
    if (out.length === 0) {
      const tr = document.createElement('tr');
      tr.className = 'none';
      const td = cell(emptyText);
      td.colSpan = table.tHead.rows[0].cells.length;
      tr.append(td);
      out.push(tr);
    }
    const tbody = table.tBodies[0];
    tbody.replaceChildren(...out);
    return tbody;
  }

  const num = (v) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
  const fixed = (v, digits) => (num(v) === undefined ? undefined : Number(v.toFixed(digits)).toLocaleString('en'));
  const ms = (v) =>
    num(v) === undefined ? undefined : v < 1000 ? `${Math.round(v)} ms` : `${(v / 1000).toFixed(1)} s`;

  /** A small line chart: one polyline per series of numbers, scaled to the largest value. */
  function chart(series, label) {
    const NS = 'http://www.w3.org/2000/svg';
    const width = 300;
    const height = 60;
    const svg = document.createElementNS(NS, 'svg');
    svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
    svg.setAttribute('preserveAspectRatio', 'none');
    svg.setAttribute('role', 'img');
    svg.setAttribute('aria-label', label);
    const title = document.createElementNS(NS, 'title');
    title.textContent = label;
    svg.append(title);
    const longest = Math.max(2, ...series.map((s) => s.values.length));
    const top = Math.max(1e-9, ...series.flatMap((s) => s.values.filter((v) => num(v) !== undefined)));
    for (const s of series) {
      const points = [];
      s.values.forEach((v, i) => {
        if (num(v) === undefined) return;
        const x = (i / (longest - 1)) * width;
        const y = height - 2 - (v / top) * (height - 4);
        points.push(`${x.toFixed(1)},${y.toFixed(1)}`);
      });
      if (points.length === 0) continue;
      if (points.length === 1) {
        // One reading so far draws no line: a dot, so the chart is not empty.
        const [x, y] = points[0].split(',');
        const dot = document.createElementNS(NS, 'circle');
        dot.setAttribute('class', `dot ${s.className || ''}`);
        dot.setAttribute('cx', x);
        dot.setAttribute('cy', y);
        dot.setAttribute('r', '2.5');
        svg.append(dot);
        continue;
      }
      const line = document.createElementNS(NS, 'polyline');
      line.setAttribute('class', `line ${s.className || ''}`);
      line.setAttribute('points', points.join(' '));
      svg.append(line);
    }
    return svg;
  }

  // ---- panels ----

  function drawRunners(list) {
    const runners = Array.isArray(list?.data) ? list.data : [];
    $('runners-count').textContent = `(${runners.length})`;
    const rows = runners.map((r) => {
      const slots = num(r.slots) ?? num(r.load?.slots);
      const load = `${num(r.inFlight) ?? 0} / ${slots ?? '?'}`;
      const heartbeat =
        num(r.lastHeartbeatAgeMs) === undefined
          ? r.source === 'static'
            ? 'probed'
            : undefined
          : `${ms(r.lastHeartbeatAgeMs)} ago`;
      const engine = r.engine ? [r.engine.model, r.engine.state].filter(Boolean).join(': ') : undefined;
      const id = cell(r.id);
      id.title = r.url || '';
      return [
        id,
        stateCell(r.state),
        stateCell(r.health),
        stateCell(r.breaker),
        stateCell(r.ready ? 'yes' : 'no'),
        cell(load, 'num'),
        cell(Array.isArray(r.models) ? r.models.join(', ') : undefined),
        cell(heartbeat),
        cell(engine),
      ];
    });
    const tbody = fill('runners', rows, 'No runners.');
    // The row of each runner names it, so a script or a spec can find it.
    [...tbody.rows].forEach((tr, i) => runners[i] && tr.setAttribute('data-runner', String(runners[i].id)));
  }

  function drawStats(stats) {
    const calls = stats?.calls;
    $('calls-empty').hidden = Boolean(calls);
    $('calls-data').hidden = !calls;
    const models = stats && typeof stats.models === 'object' && stats.models ? Object.entries(stats.models) : [];
    if (calls) {
      $('calls-total').textContent = fixed(num(calls.total) ?? 0, 0);
      $('calls-rate').textContent = fixed(num(calls.perSecond) ?? 0, 2);
      $('calls-window').textContent = num(stats.windowSeconds) === undefined ? '—' : `${stats.windowSeconds} s`;
      rates.push(num(calls.perSecond) ?? 0);
      if (rates.length > RATE_READINGS) rates.shift();
      $('calls-chart').replaceChildren(
        chart(
          [{ values: rates }],
          `Calls per second over the last ${rates.length} readings, now ${fixed(rates.at(-1), 2)}`,
        ),
      );
      const counts = (o) => Object.entries(o && typeof o === 'object' ? o : {}).sort((a, b) => b[1] - a[1]);
      fill(
        'outcomes',
        counts(calls.byOutcome).map(([k, v]) => [cell(k), cell(fixed(v, 0), 'num')]),
        'No calls yet.',
      );
      fill(
        'errors',
        counts(stats.errors?.byCode).map(([k, v]) => [cell(k), cell(fixed(v, 0), 'num')]),
        'No errors.',
      );
    }
    $('ttft-empty').hidden = models.length > 0;
    $('ttft').replaceChildren(
      ...models.map(([model, m]) => {
        const figure = document.createElement('figure');
        const h = document.createElement('h3');
        h.textContent = model;
        const series = Array.isArray(m?.series) ? m.series : [];
        const div = document.createElement('div');
        div.className = 'chart';
        const now = `p50 ${ms(m?.ttftMs?.p50) ?? '—'}, p90 ${ms(m?.ttftMs?.p90) ?? '—'}`;
        if (series.length === 0) {
          div.className = 'empty';
          div.textContent = 'No data yet.';
        } else {
          div.append(
            chart(
              [{ values: series.map((p) => p.p50) }, { values: series.map((p) => p.p90), className: 'p90' }],
              `Time to first token of ${model}: ${now}`,
            ),
          );
        }
        const caption = document.createElement('figcaption');
        const p50 = document.createElement('span');
        p50.className = 'legend-p50';
        p50.textContent = `p50 ${ms(m?.ttftMs?.p50) ?? '—'}`;
        const p90 = document.createElement('span');
        p90.className = 'legend-p90';
        p90.textContent = `p90 ${ms(m?.ttftMs?.p90) ?? '—'}`;
        caption.append(p50, ' · ', p90, ` over the last ${series.length} points`);
        figure.append(h, div, caption);
        return figure;
      }),
    );
  }

  /** Placing and running now; accepted and ended by final status since the gateway started. */
  const DETACHED = [
    ['queued', 'placing now'],
    ['running', 'running now'],
    ['accepted', 'accepted'],
    ['succeeded', 'succeeded'],
    ['failed', 'failed'],
    ['cancelled', 'cancelled'],
    ['expired', 'expired'],
  ];

  function drawDetached(stats) {
    const counts = stats?.detached;
    fill(
      'detached',
      counts && typeof counts === 'object'
        ? DETACHED.map(([key, label]) => [cell(label), cell(fixed(num(counts[key]) ?? 0, 0), 'num')])
        : [],
      'No data yet.',
    );
  }

  const BATCH_STATUSES = [
    'validating',
    'in_progress',
    'finalizing',
    'cancelling',
    'completed',
    'failed',
    'expired',
    'cancelled',
  ];

  /** Batches by status (running here, and ended here since start), lines waiting and in flight, and lines a second. */
  function drawBatches(stats) {
    const batches = stats?.batches;
    const byStatus = batches && typeof batches.batches === 'object' && batches.batches ? batches.batches : {};
    const rate = num(batches?.linesPerSecond);
    $('batches-rate').textContent = rate === undefined ? '(this gateway)' : `(this gateway, ${fixed(rate, 1)} lines/s)`;
    fill(
      'batches',
      batches && typeof batches === 'object'
        ? [
            ...BATCH_STATUSES.map((status) => [cell(status), cell(fixed(num(byStatus[status]) ?? 0, 0), 'num')]),
            [cell('lines waiting'), cell(fixed(num(batches.linesWaiting) ?? 0, 0), 'num')],
            [cell('lines in flight'), cell(fixed(num(batches.linesInFlight) ?? 0, 0), 'num')],
          ]
        : [],
      'No data yet.',
    );
  }

  /**
   * One row per runner and model with checks, and one per runner with a feed and no checks yet:
   * a feed that is not known, or an over- or under-prediction, is what an operator looks for.
   */
  function drawCache(stats) {
    const truth = stats?.cacheTruth;
    const feeds = Array.isArray(truth?.runners) ? truth.runners : [];
    const checks = Array.isArray(truth?.checks) ? truth.checks : [];
    const feedOf = new Map(feeds.map((f) => [f.runner, f]));
    const rows = [];
    const row = (runner, check) => {
      const f = feedOf.get(runner);
      const feed = f ? (f.known ? 'known' : f.engineFeed === 'down' ? 'down' : 'stale') : 'none';
      return [
        cell(runner),
        stateCell(feed),
        cell(f ? `${ms(f.lastUpdateAgeMs)} ago` : undefined),
        cell(f ? `${num(f.blocks) ?? 0} + ${num(f.pending) ?? 0}` : undefined, 'num'),
        cell(check?.model),
        cell(check ? fixed(num(check.calls) ?? 0, 0) : undefined, 'num'),
        cell(check ? fixed(num(check.predictedTokens) ?? 0, 0) : undefined, 'num'),
        cell(check ? fixed(num(check.reportedTokens) ?? 0, 0) : undefined, 'num'),
        cell(check ? fixed(num(check.overTokens) ?? 0, 0) : undefined, 'num'),
        cell(check ? fixed(num(check.underTokens) ?? 0, 0) : undefined, 'num'),
      ];
    };
    const checked = new Set();
    for (const c of checks) {
      checked.add(c.runner);
      rows.push(row(c.runner, c));
    }
    for (const f of feeds) if (!checked.has(f.runner)) rows.push(row(f.runner, undefined));
    $('cache-count').textContent = `(${feeds.filter((f) => f.known).length} of ${feeds.length} feeds known)`;
    fill('cache', rows, 'No runner feeds its cache to this gateway.');
  }

  function drawQueue(queue) {
    const models = Array.isArray(queue?.models) ? queue.models : [];
    $('queue-count').textContent = `(${num(queue?.waiting) ?? 0} waiting)`;
    fill(
      'queue',
      models.map((q) => [
        cell(q.model || '(invoke)'),
        cell(q.priority),
        cell(q.waiting, 'num'),
        cell(ms(q.oldestWaitMs), 'num'),
      ]),
      'Nothing waiting.',
    );
  }

  function drawDeployments(list) {
    const deployments = Array.isArray(list?.data) ? list.data : [];
    fill(
      'deployments',
      deployments.map((d) => {
        const s = d.status || {};
        return [
          cell(d.id ?? d.model),
          cell(s.wanted, 'num'),
          cell(s.starting, 'num'),
          cell(s.ready, 'num'),
          cell(s.draining, 'num'),
          cell(s.outdated ?? 0, 'num'),
          cell(s.reconciler),
        ];
      }),
      list === null ? 'No data: this gateway does not answer GET /v1/deployments.' : 'No deployments.',
    );
  }

  // ---- the loop ----

  /** The routes read each second, and what draws each: a panel whose route fails keeps its last figures. */
  const PANELS = [
    ['v1/runners', drawRunners],
    [
      'v1/stats',
      (stats) => {
        drawStats(stats);
        drawDetached(stats);
        drawBatches(stats);
        drawCache(stats);
      },
    ],
    ['v1/queue', drawQueue],
    ['v1/deployments', drawDeployments],
  ];

  async function tick(mine) {
    const results = await Promise.allSettled(PANELS.map(([path]) => read(path)));
    if (mine !== run) return;
    const refused = results.find((r) => r.status === 'rejected' && r.reason instanceof Refused);
    if (refused) {
      try {
        sessionStorage.removeItem(TOKEN_KEY);
      } catch {
        // Storage may be off; the token was not kept then.
      }
      showLogin(`${refused.reason.message}. Check the viewer token.`);
      return;
    }
    const failed = [];
    results.forEach((r, i) => {
      if (r.status === 'fulfilled') PANELS[i][1](r.value);
      else failed.push(r.reason instanceof Error ? r.reason.message : String(r.reason));
    });
    if (failed.length === 0) {
      setStatus('Live: read every second.');
      $('updated').textContent = `Updated ${new Date().toLocaleTimeString('en-GB')}`;
    } else {
      setStatus(`Not all figures are current (${failed.join('; ')}); trying again every second.`);
    }
    timer = setTimeout(tick, POLL_MS, mine);
  }

  function start() {
    showPanels();
    clearTimeout(timer);
    tick(++run);
  }

  document.addEventListener('DOMContentLoaded', () => {
    frameTables();
    $('login-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const value = $('token').value.trim();
      if (!value) return;
      try {
        sessionStorage.setItem(TOKEN_KEY, value);
      } catch {
        $('login-error').textContent = 'This browser keeps no session storage here; the token cannot be kept.';
        return;
      }
      $('token').value = '';
      start();
      // The form is gone: the focus goes to the first panel, not to a hidden field.
      $('runners-title').focus();
    });
    $('forget').addEventListener('click', () => {
      try {
        sessionStorage.removeItem(TOKEN_KEY);
      } catch {
        // Nothing kept: nothing to forget.
      }
      showLogin('');
    });
    if (token()) start();
    else showLogin('');
  });
})();
